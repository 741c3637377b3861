"""The Lua scripts of the Redis task backend: every change to a task is one of them, atomic in Redis.

Each script reads the server's clock (TIME), so due times and deadlines never depend on the workers'
clocks. Every key a script touches is of one task type, under that type's hash tag ``<prefix>{tasks:<type>}:``
(its *base*), so each call is one Redis Cluster slot; the keys are described in ``docs/redis-tasks.md``.
"""

from __future__ import annotations

__all__ = ["ACK", "CANCEL", "CLAIM", "ENQUEUE", "EXTEND", "FAIL", "RELEASE", "RETRY", "RETRY_LATER"]

REQUEUE_LIMIT = 100  # expired claims moved back to due per claim call

# Every script reads the time with TIME: due times, deadlines and timestamps use the Redis server's
# clock, not the workers' (which may disagree by seconds). It is rounded to the nearest ms, as epoch_ms rounds a
# task's due time: a task due by a clock is then due by the same clock here, also within its own millisecond.
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor((tonumber(t[2]) + 500) / 1000)
"""

# Put a task into its type's due set; if that makes the type's earliest due time earlier, tell sleeping workers.
_ADD_DUE = """
local function add_due(dkey, score, id, ttype, channel)
  local head = redis.call('ZRANGE', dkey, 0, 0, 'WITHSCORES')
  redis.call('ZADD', dkey, score, id)
  if head[2] == nil or score < tonumber(head[2]) then
    redis.call('PUBLISH', channel, string.format('%d', score) .. ' ' .. ttype)
  end
end
"""

# Tasks of one type. KEYS: due set, then the hash of each task.
# ARGV: channel, type, then id, payload, run_at ms, trace context ('' for none) for each task.
# Returns how many were new.
ENQUEUE = _NOW + _ADD_DUE + """
local created = 0
for i = 2, #KEYS do
  local hkey = KEYS[i]
  local a = 3 + (i - 2) * 4
  local id, payload, run_at = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  if redis.call('EXISTS', hkey) == 0 then
    redis.call('HSET', hkey, 'type', ARGV[2], 'payload', payload, 'run_at', ARGV[a + 2], 'due', ARGV[a + 2],
               'status', 'scheduled', 'attempts', 0, 'claims', 0, 'created_at', now, 'updated_at', now)
    if ARGV[a + 3] ~= '' then redis.call('HSET', hkey, 'trace_context', ARGV[a + 3]) end
    add_due(KEYS[1], run_at, id, ARGV[2], ARGV[1])
    created = created + 1
  end
end
return created
"""

# KEYS: processing and due set of each type (on a cluster: types of one slot).
# ARGV: channel, limit, owner, then the key base, name and visibility timeout (ms) of each type, in KEYS order.
# Returns {now, next, tasks}: next is the earliest due score or visibility deadline of these types (-1: none),
# tasks a list of {id, type, payload, attempt, token, due ms, trace context or ''}.
CLAIM = _NOW + _ADD_DUE + """
local channel, limit, owner = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local types = #KEYS / 2
local function base(i) return ARGV[1 + 3 * i] end
local function ttype(i) return ARGV[2 + 3 * i] end

-- 1. Claims whose visibility deadline passed belong to dead workers: their tasks are due again now.
for i = 1, types do
  local processing, due = KEYS[2 * i - 1], KEYS[2 * i]
  local expired = redis.call('ZRANGEBYSCORE', processing, '-inf', now, 'LIMIT', 0, REQUEUE_LIMIT)
  for _, id in ipairs(expired) do
    redis.call('ZREM', processing, id)
    local hkey = base(i) .. 'task:' .. id
    local h = redis.call('HMGET', hkey, 'status', 'owner', 'attempts')
    if h[1] == 'running' then
      redis.call('HSET', hkey, 'status', 'scheduled', 'due', now, 'owner', '', 'updated_at', now,
                 'error', 'visibility timeout: worker ' .. (h[2] or '?') .. ' did not finish attempt ' .. (h[3] or '?'))
      add_due(due, now, id, ttype(i), channel)
    end
  end
end

-- 2. The earliest due tasks of these types, up to the limit.
local candidates = {}
for i = 1, types do
  local got = redis.call('ZRANGEBYSCORE', KEYS[2 * i], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  for j = 1, #got, 2 do
    table.insert(candidates, {tonumber(got[j + 1]), got[j], i})
  end
end
if types > 1 then
  table.sort(candidates, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
end
local first_deadline, earliest_new = {}, {}
for i = 1, types do first_deadline[i] = redis.call('ZRANGE', KEYS[2 * i - 1], 0, 0, 'WITHSCORES')[2] end
local tasks = {}
for k = 1, math.min(limit, #candidates) do
  local c = candidates[k]
  local id, i = c[2], c[3]
  redis.call('ZREM', KEYS[2 * i], id)
  local hkey = base(i) .. 'task:' .. id
  local h = redis.call('HMGET', hkey, 'type', 'payload', 'status', 'trace_context')
  if h[3] == 'scheduled' then
    local attempt = redis.call('HINCRBY', hkey, 'attempts', 1)
    local token = redis.call('HINCRBY', hkey, 'claims', 1)
    local deadline = now + tonumber(ARGV[3 + 3 * i])
    redis.call('HSET', hkey, 'status', 'running', 'owner', owner, 'started_at', now, 'updated_at', now)
    redis.call('ZADD', KEYS[2 * i - 1], deadline, id)
    if earliest_new[i] == nil or deadline < earliest_new[i] then earliest_new[i] = deadline end
    table.insert(tasks, {id, h[1], h[2], attempt, token, c[1], h[4] or ''})
  end
end
-- The type's other workers must learn of a new earliest deadline: if this worker dies, one of them takes its tasks.
for i = 1, types do
  if earliest_new[i] ~= nil and (first_deadline[i] == nil or earliest_new[i] < tonumber(first_deadline[i])) then
    redis.call('PUBLISH', channel, string.format('%d', earliest_new[i]) .. ' ' .. ttype(i))
  end
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

# Claims of one type. KEYS: processing. ARGV: key base, then id, token, visibility timeout ms per claim.
# Returns 1/0 per claim: whether it is still held (and was extended).
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

# KEYS: task, processing, due set. ARGV: id, token, delay ms, error, channel, type.
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

# KEYS: task, due set. ARGV: id, retention ms. Only a task still in its due set can be cancelled.
CANCEL = _NOW + """
if redis.call('HGET', KEYS[1], 'status') ~= 'scheduled' then return 0 end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'status', 'cancelled', 'finished_at', now, 'updated_at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

# KEYS: task, failed, due set. ARGV: id, channel, type.
RETRY = _NOW + _ADD_DUE + """
if redis.call('HGET', KEYS[1], 'status') ~= 'failed' then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'status', 'scheduled', 'attempts', 0, 'due', now, 'updated_at', now)
redis.call('HDEL', KEYS[1], 'finished_at')
add_due(KEYS[3], now, ARGV[1], ARGV[3], ARGV[2])
return 1
"""
