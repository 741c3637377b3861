"""The Redis lock store's Lua scripts (mutexcron.stores.redis): one hash per job, each operation one script, atomic
on the server and timed by its clock.
"""

__all__ = [
    "ACQUIRE",
    "ACQUIRE_MANY",
    "ACQUIRE_ON_MASTER",
    "CLAIM_NEXT",
    "CLOSE_INCIDENT",
    "DEFINE",
    "DELETE",
    "FORCE_UNLOCK",
    "OPEN_INCIDENT",
    "PAUSE",
    "READ_ALL",
    "READ_ON_MASTER",
    "RELEASE",
    "RELEASE_MANY",
    "RELEASE_ON_MASTER",
    "RENEW",
    "RENEW_WATCHING",
    "RESUME",
    "SEED",
    "SET_SCHEDULE",
    "TAKE_OVER",
]

# Every script reads the time with TIME so that leases run on the Redis server's clock, not on the
# clocks of the instances (which may disagree by seconds).
_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# After _NOW. revive(key, name) creates a missing hash (created_at = now) or revives a tombstone (with its
# token, fire time, pause, override and created_at); 1 if it did either.
_REVIVE = """
local function revive(key, name)
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 'name', name, 'locked', '0', 'locked_by', '', 'last_locked_at', '',
               'last_released_at', '', 'lock_until', '', 'last_fire_time', '', 'token', '0', 'deleted', '0',
               'created_at', now)
    return 1
  elseif redis.call('HGET', key, 'deleted') == '1' then
    redis.call('HSET', key, 'deleted', '0')
    return 1
  end
  return 0
end
"""

SEED = _NOW + _REVIVE + "return revive(KEYS[1], ARGV[1])"

# After _REVIVE. acquire(key, name, owner, lease_ms, fire_ms ('' for a manual run), schedule_version ('' for
# unchecked), attempt (unique to the call)). Refusals in the contract's order: paused, stale schedule, already ran,
# busy (held, or a live overlap slot holding another tick: OverlapStore), read from a tombstone too; a refusal
# writes nothing (but for creating a missing hash), a win revives a tombstone, empties the slot and sets tick_token.
# The same attempt again, while it holds the lock, is a client's retry of this call after its reply was lost: it
# gets the same answer, not 'already_ran' for its own tick.
# A loser costs one HMGET, a winner one HSET more: at 8 instances x 100 jobs a tick the server's work for
# each instant is on the fleet's critical path (each instance's batch waits behind the others').
_ACQUIRE_ONE = """
local function acquire(key, name, owner, lease, fire, wanted, attempt)
  local fields = {'locked', 'lock_until', 'last_fire_time', 'token', 'locked_by', 'paused', 'paused_until',
                  'schedule_version', 'attempt', 'deleted', 'next_fire', 'next_until', 'tick_token'}
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
  -- a run a task worker took over and never released: kept for its tick's retry one more lease (TakeOverStore)
  if h[1] == '1' and (h[13] or '0') ~= '0' and h[13] ~= h[4] and (tonumber(h[2]) or 0) + tonumber(lease) > now then
    return {'busy', holder}
  end
  local slot = tonumber(h[11])
  if slot and (tonumber(h[12]) or 0) > now and (not last_fire or slot > last_fire)
     and (fire == '' or tonumber(fire) ~= slot) then return {'busy', holder} end
  local token = (tonumber(h[4]) or 0) + 1
  local won = {'locked', '1', 'locked_by', owner, 'last_locked_at', now, 'lock_until', now + tonumber(lease),
               'token', token, 'tick_token', token, 'attempt', attempt, 'next_fire', '', 'deleted', '0'}
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
local h = redis.call('HMGET', KEYS[1], 'locked', 'token')
if h[1] ~= '1' or h[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lock_until', now + tonumber(ARGV[2]))
return 1
"""

# ARGV: token, lease_ms. RENEW, answering 2 (renewed, and asked to stop) when CLAIM_NEXT asked this token to stop.
RENEW_WATCHING = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'locked', 'token', 'stop_token')
if h[1] ~= '1' or h[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lock_until', now + tonumber(ARGV[2]))
if h[3] == ARGV[1] then return 2 end
return 1
"""

# ARGV: fire_ms, lease_ms, replace ('1' or '0'). The overlap slot (OverlapStore.claim_next): 1 if it now holds the
# tick; with replace, the live lock's token is asked to stop. A slot is live until next_until, while its tick is
# later than the last fire time.
CLAIM_NEXT = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'locked', 'lock_until', 'last_fire_time', 'token', 'next_fire', 'next_until',
                     'deleted')
if not h[4] or h[7] == '1' then return 0 end
local fire, last_fire, slot = tonumber(ARGV[1]), tonumber(h[3]), tonumber(h[5])
if last_fire and fire <= last_fire then return 0 end
if slot and (tonumber(h[6]) or 0) > now and (not last_fire or slot > last_fire) and slot ~= fire
   and not (ARGV[3] == '1' and slot < fire) then return 0 end
redis.call('HSET', KEYS[1], 'next_fire', ARGV[1], 'next_until', now + tonumber(ARGV[2]))
if ARGV[3] == '1' and h[1] == '1' and (tonumber(h[2]) or 0) > now then
  redis.call('HSET', KEYS[1], 'stop_token', h[4])
end
return 1
"""

# After _NOW. release(key, token, hold_at_least_ms, outcome ('' for none), error ('' for none)): 1 if the token
# held the lock (released, or kept until last_locked_at + hold_at_least), else 0 and nothing written.
_RELEASE_ONE = """
local function release(key, token, hold, outcome, err)
  local h = redis.call('HMGET', key, 'locked', 'token', 'last_locked_at')
  if h[1] ~= '1' or h[2] ~= token then return 0 end
  local hold_until = (tonumber(h[3]) or 0) + tonumber(hold)
  local fields = {'lock_until', hold_until, 'last_released_at', now, 'tick_token', '0'}
  if hold_until <= now then fields = {'locked', '0', 'lock_until', now, 'last_released_at', now, 'tick_token', '0'} end
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

# ARGV: tick_token, owner, lease_ms, schedule_version ('' for unchecked). TakeOverStore.take_over: {status, token or
# holder or version}. A paused or stale refusal of a run its acquirer still holds releases it unrun.
TAKE_OVER = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'locked', 'lock_until', 'token', 'tick_token', 'locked_by', 'paused',
                     'paused_until', 'schedule_version', 'deleted')
local holder = h[5] or ''
if h[9] == '1' or h[1] ~= '1' or h[4] ~= ARGV[1] then return {'already_ran', holder} end
local version, paused_until, refusal = tonumber(h[8]) or 0, tonumber(h[7]), nil
if h[6] == '1' and (paused_until == nil or paused_until > now) then refusal = {'paused', holder}
elseif ARGV[4] ~= '' and tonumber(ARGV[4]) ~= version then refusal = {'stale_schedule', tostring(version)} end
if refusal then
  if h[3] == ARGV[1] then
    redis.call('HSET', KEYS[1], 'locked', '0', 'lock_until', now, 'last_released_at', now, 'tick_token', '0')
  end
  return refusal
end
if h[3] ~= ARGV[1] and (tonumber(h[2]) or 0) > now then return {'busy', holder} end
local token = tonumber(h[3]) + 1
redis.call('HSET', KEYS[1], 'locked_by', ARGV[2], 'lock_until', now + tonumber(ARGV[3]), 'token', token, 'attempt', '')
return {'acquired', tostring(token)}
"""

FORCE_UNLOCK = _NOW + """
if redis.call('HGET', KEYS[1], 'locked') ~= '1' then return 0 end
redis.call('HSET', KEYS[1], 'locked', '0', 'lock_until', now, 'last_released_at', now, 'tick_token', '0')
return 1
"""

DELETE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[1], 'deleted') == '1' then return 0 end
redis.call('HSET', KEYS[1], 'deleted', '1')
return 1
"""

# Every lock hash of KEYS, each as HGETALL answers it ({} for none): what locks() reads on one server, one command
# for a batch of locks where a pipeline of HGETALL costs the client a command's encoding and parsing each.
READ_ALL = """
local documents = {}
for i, key in ipairs(KEYS) do documents[i] = redis.call('HGETALL', key) end
return documents
"""

# The control scripts change a visible hash only, and return it whole (nil if there is none).
_VISIBLE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[1], 'deleted') == '1' then return false end
"""
_RETURN_ALL = "\nreturn redis.call('HGETALL', KEYS[1])\n"

# ARGV: until_ms ('' for until resume()), by, note
PAUSE = _NOW + _VISIBLE + """
redis.call('HSET', KEYS[1], 'paused', '1', 'paused_at', now, 'paused_until', ARGV[1], 'paused_by', ARGV[2],
           'pause_note', ARGV[3])
""" + _RETURN_ALL

# ARGV: pause_after ('' for never), by, note. RECORD_FAILURE: {failures, 1 if this call paused the job}.
RECORD_FAILURE = _NOW + """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[1], 'deleted') == '1' then return {0, 0} end
local failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
local h = redis.call('HMGET', KEYS[1], 'paused', 'paused_until')
local paused = h[1] == '1' and (h[2] == false or h[2] == '' or tonumber(h[2]) > now)
if ARGV[1] == '' or failures < tonumber(ARGV[1]) or paused then return {failures, 0} end
redis.call('HSET', KEYS[1], 'paused', '1', 'paused_at', now, 'paused_until', '', 'paused_by', ARGV[2],
           'pause_note', ARGV[3])
return {failures, 1}
"""

# A pause whose until has passed ended then, not now: ticks after it stay missed (to catch up), not paused.
RESUME = _NOW + _VISIBLE + """
if redis.call('HGET', KEYS[1], 'paused') == '1' then
  local ended = tonumber(redis.call('HGET', KEYS[1], 'paused_until'))
  if ended == nil or ended > now then ended = now end
  redis.call('HSET', KEYS[1], 'paused', '0', 'paused_at', '', 'paused_until', '', 'paused_by', '', 'pause_note', '',
             'resumed_at', ended)
end
""" + _RETURN_ALL

# ARGV: spec, timezone, by ('' for None)
SET_SCHEDULE = _NOW + _VISIBLE + """
redis.call('HINCRBY', KEYS[1], 'schedule_version', 1)
redis.call('HSET', KEYS[1], 'schedule', ARGV[1], 'schedule_timezone', ARGV[2], 'schedule_by', ARGV[3],
           'schedule_changed_at', now)
""" + _RETURN_ALL

# ARGV: name, definition ('' to remove the schedule), by. A definition creates or revives the hash and clears the
# override; a removal changes a visible hash only (nil otherwise) and hides it. Either bumps the version. Returns the
# hash whole (a removed one with deleted = 1).
DEFINE = _NOW + _REVIVE + """
if ARGV[2] == '' then""" + _VISIBLE + """  redis.call('HSET', KEYS[1], 'definition', '', 'deleted', '1')
else
  revive(KEYS[1], ARGV[1])
  redis.call('HSET', KEYS[1], 'definition', ARGV[2], 'schedule', '', 'schedule_timezone', '')
end
redis.call('HINCRBY', KEYS[1], 'schedule_version', 1)
redis.call('HSET', KEYS[1], 'schedule_by', ARGV[3], 'schedule_changed_at', now)
""" + _RETURN_ALL

# ARGV: incident, the open incident it replaces ('' for none). Open it if the visible hash's open incident is the
# one it replaces (none: no incident open); close it if it is the open one.
OPEN_INCIDENT = _NOW + _VISIBLE + """
if (redis.call('HGET', KEYS[1], 'incident') or '') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'incident', ARGV[1], 'incident_at', now)
return 1
"""

CLOSE_INCIDENT = _VISIBLE + """
if redis.call('HGET', KEYS[1], 'incident') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'incident', '', 'incident_at', '')
return 1
"""
