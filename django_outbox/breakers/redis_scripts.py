"""The two Lua scripts that change a breaker kept in Redis, atomically between processes.

:class:`~django_outbox.breakers.redis_store.RedisBreakerStore` runs them: ``ADMIT_LUA``
for each admission, ``RECORD_LUA`` for each reported outcome.
"""

# A hash per breaker: failures, open_until (ms, absent while closed), probe (its token),
# probe_until (ms), and "a:<token>" = until when (ms) each admitted delivery counts as
# awaiting its answer.  Time is Redis's TIME (workers' clocks never matter; effects
# replication lets it precede a write); ms stay below 10**14, which Lua prints exactly.
# ARGV: token, cool-off, expiry, threshold, answer-within (ms), busy wait (ms).
ADMIT_LUA = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local all = redis.call('HGETALL', KEYS[1])
local h, awaiting, first = {}, 0, nil
for i = 1, #all, 2 do
  local name, value = all[i], all[i + 1]
  if string.sub(name, 1, 2) == 'a:' then
    local until_ms = tonumber(value)
    if until_ms <= now then
      redis.call('HDEL', KEYS[1], name)
    else
      awaiting = awaiting + 1
      if not first or until_ms < first then first = until_ms end
    end
  else
    h[name] = value
  end
end
local open_until, probe_until = tonumber(h.open_until), tonumber(h.probe_until)
if open_until then
  if now < open_until then return {'held', open_until - now, 'open'} end
  if h.probe and probe_until and now < probe_until then
    return {'held', probe_until - now, 'open'}
  end
  redis.call('HSET', KEYS[1], 'probe', ARGV[1], 'probe_until', now + ARGV[2], 'failures', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'probe', 0, ''}
end
local failures = tonumber(h.failures) or 0
if awaiting > 0 and failures + awaiting >= tonumber(ARGV[4]) then
  local wait = tonumber(ARGV[6])
  if failures > 0 then wait = math.max(wait, first - now) end
  return {'held', wait, 'busy'}
end
redis.call('HSET', KEYS[1], 'a:' .. ARGV[1], now + ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'pass', 0, ''}
"""
# ARGV: '1' failed or '0', token or '', threshold, cool-off (ms), expiry (ms).
# Returns 2 when the breaker is closed after a success, 1 for a failure, 0 if ignored.
RECORD_LUA = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if ARGV[2] ~= '' then redis.call('HDEL', KEYS[1], 'a:' .. ARGV[2]) end
local s = redis.call('HMGET', KEYS[1], 'failures', 'open_until', 'probe')
local failures = (tonumber(s[1]) or 0) + 1
if s[2] then
  if ARGV[2] == '' or s[3] ~= ARGV[2] then return 0 end
  if ARGV[1] == '0' then redis.call('DEL', KEYS[1]) return 2 end
  redis.call('HSET', KEYS[1], 'open_until', now + ARGV[4], 'failures', failures)
  redis.call('HDEL', KEYS[1], 'probe', 'probe_until')
elseif ARGV[1] == '0' then
  if s[1] then redis.call('HDEL', KEYS[1], 'failures') end
  return 2
elseif failures >= tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'failures', failures, 'open_until', now + ARGV[4])
else
  redis.call('HSET', KEYS[1], 'failures', failures)
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""
