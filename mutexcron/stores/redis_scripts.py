"""The Redis lock store's Lua scripts (mutexcron.stores.redis): one hash per job, each operation one script, atomic
on the server and timed by its clock. Every script that changes a hash bumps its ``revision`` (absent: 0), which
WRITE compares.
"""

__all__ = [
    "ACQUIRE",
    "ACQUIRE_MANY",
    "ACQUIRE_ON_MASTER",
    "READ_ALL",
    "READ_ON_MASTER",
    "RELEASE",
    "RELEASE_MANY",
    "RELEASE_ON_MASTER",
    "RENEW",
    "SEED",
    "WRITE",
]

# Every script reads the time with TIME so that leases run on the Redis server's clock, not on the
# clocks of the instances (which may disagree by seconds).
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# After _NOW. revive(key, name) creates a missing hash (created_at = now, revision 0) or revives a tombstone (with
# its token, fire time, pause, override and created_at; its revision bumped); 1 if it did either.
_REVIVE = """
local function revive(key, name)
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 'name', name, 'locked', '0', 'locked_by', '', 'last_locked_at', '',
               'last_released_at', '', 'lock_until', '', 'last_fire_time', '', 'token', '0', 'deleted', '0',
               'created_at', now)
    return 1
  elseif redis.call('HGET', key, 'deleted') == '1' then
    redis.call('HSET', key, 'deleted', '0')
    redis.call('HINCRBY', key, 'revision', 1)
    return 1
  end
  return 0
end
"""

SEED = _NOW + _REVIVE + "return revive(KEYS[1], ARGV[1])"

# After _REVIVE. acquire(key, name, owner, lease_ms, fire_ms ('' for a manual run), schedule_version ('' for
# unchecked), attempt (unique to the call)). Refusals in the contract's order: paused, stale schedule, already ran,
# busy (held, a live overlap slot holding another tick, or a take-over's reservation), read from a tombstone too; a
# refusal writes nothing (but for creating a missing hash), a win revives a tombstone, empties the slot, sets
# tick_token and bumps the revision (mutexcron.stores.changes.acquire is the rule).
# The same attempt again, while it holds the lock, is a client's retry of this call after its reply was lost: it
# gets the same answer, not 'already_ran' for its own tick (WRITE clears the attempt when it changes the token).
# A loser costs one HMGET, a winner one HSET more: at 8 instances x 100 jobs a tick the server's work for
# each instant is on the fleet's critical path (each instance's batch waits behind the others').
_ACQUIRE_ONE = """
local function acquire(key, name, owner, lease, fire, wanted, attempt)
  local fields = {'locked', 'lock_until', 'last_fire_time', 'token', 'locked_by', 'paused', 'paused_until',
                  'schedule_version', 'attempt', 'deleted', 'next_fire', 'next_until', 'tick_token', 'revision'}
  local h = redis.call('HMGET', key, unpack(fields))
  if not h[4] then  -- no hash: create it, then read again
    revive(key, name)
    h = redis.call('HMGET', key, unpack(fields))
  end
  if h[1] == '1' and h[9] == attempt then return {'acquired', h[4]} end
  local holder = h[5] or ''
  local paused_until = tonumber(h[7])
  if h[6] == '1' and (paused_until == nil or paused_until > now) then return {'paused', holder} end
  local version = tonumber(h[8]) or 0
  if wanted ~= '' and tonumber(wanted) ~= version then
    return {'stale_schedule', tostring(version)}
  end
  local last_fire = tonumber(h[3])
  if fire ~= '' and last_fire and last_fire >= tonumber(fire) then return {'already_ran', holder} end
  if h[1] == '1' and (tonumber(h[2]) or 0) > now then return {'busy', holder} end
  -- a run a task worker took over and never released: kept for its tick's retry one more lease (changes.reserved)
  if h[1] == '1' and (h[13] or '0') ~= '0' and h[13] ~= h[4] and (tonumber(h[2]) or 0) + tonumber(lease) > now then
    return {'busy', holder}
  end
  local slot = tonumber(h[11])
  if slot and (tonumber(h[12]) or 0) > now and (not last_fire or slot > last_fire)
     and (fire == '' or tonumber(fire) ~= slot) then return {'busy', holder} end
  local token = (tonumber(h[4]) or 0) + 1
  local won = {'locked', '1', 'locked_by', owner, 'last_locked_at', now, 'lock_until', now + tonumber(lease),
               'token', token, 'tick_token', token, 'attempt', attempt, 'next_fire', '', 'next_until', '',
               'deleted', '0', 'revision', (tonumber(h[14]) or 0) + 1}
  if fire ~= '' then won[#won + 1] = 'last_fire_time'; won[#won + 1] = fire end
  redis.call('HSET', key, unpack(won))
  return {'acquired', tostring(token)}
end
"""

# ARGV: name, owner, lease_ms, fire_ms, schedule_version, attempt.
ACQUIRE = _NOW + _REVIVE + _ACQUIRE_ONE + "return acquire(KEYS[1], unpack(ARGV))"

# One key a lock, and ARGV[1] a JSON array of each lock's six arguments (as ACQUIRE's, all strings): one reply a
# lock, all at one instant of the server's clock. One JSON argument rather than six a lock: the client encodes
# each argument of a command in Python, which cost the fleet's instances more CPU than cjson costs the server. On one
# server only: a cluster refuses keys of several slots in one script.
_EACH = """
local requests = cjson.decode(ARGV[1])
local replies = {}
for i = 1, #KEYS do replies[i] = %s(KEYS[i], unpack(requests[i])) end
return replies
"""
ACQUIRE_MANY = _NOW + _REVIVE + _ACQUIRE_ONE + _EACH % "acquire"

# ARGV: token, lease_ms
RENEW = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'locked', 'token', 'revision')
if h[1] ~= '1' or h[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lock_until', now + tonumber(ARGV[2]), 'revision', (tonumber(h[3]) or 0) + 1)
return 1
"""

# After _NOW. release(key, token, hold_at_least_ms, outcome ('' for none), error ('' for none)): 1 if the token
# held the lock (released, or kept until last_locked_at + hold_at_least), else 0 and nothing written.
_RELEASE_ONE = """
local function release(key, token, hold, outcome, err)
  local h = redis.call('HMGET', key, 'locked', 'token', 'last_locked_at', 'revision')
  if h[1] ~= '1' or h[2] ~= token then return 0 end
  local hold_until = (tonumber(h[3]) or 0) + tonumber(hold)
  local fields = {'lock_until', hold_until, 'last_released_at', now, 'tick_token', '0',
                  'revision', (tonumber(h[4]) or 0) + 1}
  if hold_until <= now then  -- not held on: released now
    fields[2] = now; fields[#fields + 1] = 'locked'; fields[#fields + 1] = '0'
  end
  if outcome ~= '' then
    for _, v in ipairs({'last_outcome', outcome, 'last_finished_at', now, 'last_error', err}) do
      fields[#fields + 1] = v
    end
    if outcome == 'succeeded' then
      for _, v in ipairs({'last_success_at', now, 'failures', '0'}) do fields[#fields + 1] = v end
    end
  end
  redis.call('HSET', key, unpack(fields))
  return 1
end
"""

# ARGV: token, hold_at_least_ms, outcome, error (as release's)
RELEASE = _NOW + _RELEASE_ONE + "return release(KEYS[1], unpack(ARGV))"

# One key a lock, and ARGV[1] a JSON array of each lock's four arguments (as RELEASE's, all strings), as
# ACQUIRE_MANY: one reply a lock.
RELEASE_MANY = _NOW + _RELEASE_ONE + _EACH % "release"

# The batch scripts for one master of a Redis Cluster (7.0 and later): declared keys must share one slot, but a
# script flagged allow-cross-slot-keys may use undeclared keys of any slot its node serves. So the keys come in the
# JSON argument ([key, arguments...] a lock), and a lock whose key the node does not serve (its slot moved) answers
# 'not_local' before anything is written to it, to be asked again where it lives.
_ON_MASTER = "#!lua flags=allow-cross-slot-keys\n"
_EACH_LOCAL = """
local requests = cjson.decode(ARGV[1])
local replies = {}
for i, r in ipairs(requests) do
  local here = redis.pcall('EXISTS', r[1])
  if type(here) == 'table' and here.err then replies[i] = 'not_local' else replies[i] = %s(unpack(r)) end
end
return replies
"""
ACQUIRE_ON_MASTER = _ON_MASTER + _NOW + _REVIVE + _ACQUIRE_ONE + _EACH_LOCAL % "acquire"
RELEASE_ON_MASTER = _ON_MASTER + _NOW + _RELEASE_ONE + _EACH_LOCAL % "release"
# READ_ALL's for one master: each lock hash as HGETALL answers it.
READ_ON_MASTER = _ON_MASTER + "local function read(key) return redis.call('HGETALL', key) end" + _EACH_LOCAL % "read"

# Every lock hash of KEYS, each as HGETALL answers it ({} for none): what locks() reads on one server, one command
# for a batch of locks where a pipeline of HGETALL costs the client a command's encoding and parsing each.
READ_ALL = """
local documents = {}
for i, key in ipairs(KEYS) do documents[i] = redis.call('HGETALL', key) end
return documents
"""

# ControlStore.write: ARGV[1] the revision expected (a missing hash's is 0), then the document's fields as field,
# value pairs ('revision' not among them). If the hash's revision is the one expected, set them all and the revision
# one more, and answer 1; else 0, nothing written. A new token (a take-over) clears the acquire's attempt, so that a
# retried acquire is not answered with the taker's token.
WRITE = """
local h = redis.call('HMGET', KEYS[1], 'revision', 'token')
local revision = tonumber(h[1]) or 0
if revision ~= tonumber(ARGV[1]) then return 0 end
local fields = {'revision', revision + 1}
for i = 2, #ARGV do fields[i + 1] = ARGV[i] end
for i = 2, #ARGV - 1, 2 do
  if ARGV[i] == 'token' and tonumber(ARGV[i + 1]) ~= tonumber(h[2]) then
    fields[#fields + 1] = 'attempt'; fields[#fields + 1] = ''
  end
end
redis.call('HSET', KEYS[1], unpack(fields))
return 1
"""
