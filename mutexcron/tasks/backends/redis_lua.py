"""The Lua scripts of the Redis task backend: every change to a task is one of them, atomic in Redis.

Each script reads the server's clock (TIME), so due times and deadlines never depend on the workers'
clocks; the keys they use are described in ``docs/redis-tasks.md``.
"""

from __future__ import annotations

__all__ = ["ACK", "CANCEL", "CLAIM", "ENQUEUE", "EXTEND", "FAIL", "PENDING", "RELEASE", "RETRY", "RETRY_LATER"]

REQUEUE_LIMIT = 100  # expired claims moved back to due per claim call

# Every script reads the time with TIME: due times, deadlines and timestamps use the Redis server's
# clock, not the workers' (which may disagree by seconds).
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# Put a task into a due set (<base>due:<type>), and its type into <base>types; if that makes the type's
# earliest due time earlier, tell sleeping workers.
_ADD_DUE = """
local function add_due(dkey, score, id, ttype, channel)
  local head = redis.call('ZRANGE', dkey, 0, 0, 'WITHSCORES')
  redis.call('ZADD', dkey, score, id)
  redis.call('SADD', string.sub(dkey, 1, #dkey - #ttype - 4) .. 'types', ttype)
  if head[2] == nil or score < tonumber(head[2]) then
    redis.call('PUBLISH', channel, string.format('%d', score) .. ' ' .. ttype)
  end
end
"""

# KEYS: task hash, due set, then the same pair for each further task.
# ARGV: channel, then id, type, payload, run_at ms, trace context ('' for none) for each task.
# Returns how many were new.
ENQUEUE = _NOW + _ADD_DUE + """
local created = 0
for i = 1, #KEYS / 2 do
  local hkey, dkey = KEYS[2 * i - 1], KEYS[2 * i]
  local a = 1 + (i - 1) * 5
  local id, ttype, payload, run_at = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], tonumber(ARGV[a + 4])
  if redis.call('EXISTS', hkey) == 0 then
    redis.call('HSET', hkey, 'type', ttype, 'payload', payload, 'run_at', ARGV[a + 4], 'due', ARGV[a + 4],
               'status', 'scheduled', 'attempts', 0, 'claims', 0, 'created_at', now, 'updated_at', now)
    if ARGV[a + 5] ~= '' then redis.call('HSET', hkey, 'trace_context', ARGV[a + 5]) end
    add_due(dkey, run_at, id, ttype, ARGV[1])
    created = created + 1
  end
end
return created
"""

# KEYS: processing, then one due set per task type.
# ARGV: key base, channel, limit, owner, then the visibility timeout (ms) of each type, in KEYS order.
# Returns {now, next, tasks}: next is the earliest due score of these types or visibility deadline
# (-1: none), tasks a list of {id, type, payload, attempt, token, due ms, trace context or ''}.
CLAIM = _NOW + _ADD_DUE + """
local base, channel, limit, owner = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local processing = KEYS[1]

-- 1. Claims whose visibility deadline passed belong to dead workers: their tasks are due again now.
local expired = redis.call('ZRANGEBYSCORE', processing, '-inf', now, 'LIMIT', 0, REQUEUE_LIMIT)
for _, id in ipairs(expired) do
  redis.call('ZREM', processing, id)
  local hkey = base .. 'task:' .. id
  local h = redis.call('HMGET', hkey, 'type', 'status', 'owner', 'attempts')
  if h[2] == 'running' then
    redis.call('HSET', hkey, 'status', 'scheduled', 'due', now, 'owner', '', 'updated_at', now,
               'error', 'visibility timeout: worker ' .. (h[3] or '?') .. ' did not finish attempt ' .. (h[4] or '?'))
    add_due(base .. 'due:' .. h[1], now, id, h[1], channel)
  end
end

-- 2. The earliest due tasks of these types, up to the limit.
local candidates = {}
for i = 2, #KEYS do
  local got = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  for j = 1, #got, 2 do
    table.insert(candidates, {tonumber(got[j + 1]), got[j], i})
  end
end
if #KEYS > 2 then
  table.sort(candidates, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
end
local first_deadline = redis.call('ZRANGE', processing, 0, 0, 'WITHSCORES')
local earliest_new = nil
local tasks = {}
for k = 1, math.min(limit, #candidates) do
  local c = candidates[k]
  local id = c[2]
  redis.call('ZREM', KEYS[c[3]], id)
  local hkey = base .. 'task:' .. id
  local h = redis.call('HMGET', hkey, 'type', 'payload', 'status', 'trace_context')
  if h[3] == 'scheduled' then
    local attempt = redis.call('HINCRBY', hkey, 'attempts', 1)
    local token = redis.call('HINCRBY', hkey, 'claims', 1)
    local deadline = now + tonumber(ARGV[3 + c[3]])
    redis.call('HSET', hkey, 'status', 'running', 'owner', owner, 'started_at', now, 'updated_at', now)
    redis.call('ZADD', processing, deadline, id)
    if earliest_new == nil or deadline < earliest_new then earliest_new = deadline end
    table.insert(tasks, {id, h[1], h[2], attempt, token, c[1], h[4] or ''})
  end
end
-- Others must learn of the new deadline: if this worker dies, one of them takes its tasks.
if earliest_new ~= nil and (first_deadline[2] == nil or earliest_new < tonumber(first_deadline[2])) then
  redis.call('PUBLISH', channel, string.format('%d', earliest_new) .. ' *')
end

-- 3. When to look again.
local next = nil
for i = 1, #KEYS do
  local head = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')
  if head[2] ~= nil then
    local score = tonumber(head[2])
    if next == nil or score < next then next = score end
  end
end
return {now, next or -1, tasks}
""".replace("REQUEUE_LIMIT", str(REQUEUE_LIMIT))

# KEYS: processing. ARGV: key base, then id, token, visibility timeout ms per claim. Returns 1/0 per claim.
EXTEND = _NOW + """
local result = {}
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  local h = redis.call('HMGET', ARGV[1] .. 'task:' .. id, 'status', 'claims')
  if h[1] == 'running' and h[2] == ARGV[i + 1] then
    redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[i + 2]), id)
    table.insert(result, 1)
  else
    table.insert(result, 0)
  end
end
return result
"""

_OWNED = """
local h = redis.call('HMGET', KEYS[1], 'status', 'claims')
if h[1] ~= 'running' or h[2] ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
"""

# KEYS: task, processing. ARGV: id, token, retention ms.
ACK = _NOW + _OWNED + """
redis.call('HSET', KEYS[1], 'status', 'succeeded', 'owner', '', 'finished_at', now, 'updated_at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: task, processing, due set of its type. ARGV: id, token, delay ms, error, channel, type.
RETRY_LATER = _NOW + _ADD_DUE + _OWNED + """
local due = now + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'scheduled', 'owner', '', 'due', due, 'error', ARGV[4], 'updated_at', now)
add_due(KEYS[3], due, ARGV[1], ARGV[6], ARGV[5])
return 1
"""

# KEYS: task, processing, failed. ARGV: id, token, error.
FAIL = _NOW + _OWNED + """
redis.call('HSET', KEYS[1], 'status', 'failed', 'owner', '', 'error', ARGV[3], 'finished_at', now,
           'updated_at', now)
redis.call('ZADD', KEYS[3], now, ARGV[1])
return 1
"""

# A claimed task the worker will not run after all (it is stopping): due again at its due time, the
# attempt not counted. KEYS: task, processing, due set. ARGV: id, token, channel, type.
RELEASE = _NOW + _ADD_DUE + _OWNED + """
local due = tonumber(redis.call('HGET', KEYS[1], 'due')) or now
redis.call('HINCRBY', KEYS[1], 'attempts', -1)
redis.call('HSET', KEYS[1], 'status', 'scheduled', 'owner', '', 'updated_at', now)
add_due(KEYS[3], due, ARGV[1], ARGV[4], ARGV[3])
return 1
"""

# KEYS: task. ARGV: id, key base, retention ms. Only a task still in its due set can be cancelled.
CANCEL = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'type', 'status')
if h[2] ~= 'scheduled' then return 0 end
if redis.call('ZREM', ARGV[2] .. 'due:' .. h[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', now, 'updated_at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: task, failed. ARGV: id, key base, channel.
RETRY = _NOW + _ADD_DUE + """
local h = redis.call('HMGET', KEYS[1], 'type', 'status')
if h[2] ~= 'failed' then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'status', 'scheduled', 'attempts', 0, 'due', now, 'updated_at', now)
redis.call('HDEL', KEYS[1], 'finished_at')
add_due(ARGV[2] .. 'due:' .. h[1], now, ARGV[1], h[1], ARGV[3])
return 1
"""

# KEYS: the types set. ARGV: key base. Returns {type, count, ...}: the size of each type's due set (its
# scheduled tasks, due or not), one ZCARD per type ever scheduled since <base>types exists.
PENDING = """
local counts = {}
for _, ttype in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  table.insert(counts, ttype)
  table.insert(counts, redis.call('ZCARD', ARGV[1] .. 'due:' .. ttype))
end
return counts
"""
