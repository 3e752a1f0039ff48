"""The two Lua scripts that change a breaker kept in Redis, atomically between processes.

:class:`~django_outbox.breakers.redis_store.RedisBreakerStore` runs them: ``ADMIT_LUA``
for each admission, ``RECORD_LUA`` for each reported outcome.
"""

# A hash per breaker: failures, open_until (ms, absent while closed), probe (its token),
# probe_until (ms), held_until (ms: the end of the last hold it answered), throttled_until
# (ms: the end of the hold a 429 asked), and "a:<token>" = until when (ms) each admitted
# delivery counts as awaiting its answer.  Time is Redis's TIME (workers' clocks never
# matter; effects replication lets it precede a write); ms stay below 10**14, which Lua
# prints exactly.
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
local function hold(wait, why)
  wait = math.max(1, wait)
  if now + wait > (tonumber(h.held_until) or 0) then
    redis.call('HSET', KEYS[1], 'held_until', now + wait)
  end
  redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[3]), wait))
  return {'held', wait, why}
end
local throttled_until = tonumber(h.throttled_until)
if throttled_until and now < throttled_until then
  return hold(throttled_until - now, 'throttled')
end
local open_until, probe_until = tonumber(h.open_until), tonumber(h.probe_until)
if open_until then
  if now < open_until then return hold(open_until - now, 'open') end
  if h.probe and probe_until and now < probe_until then
    return hold(probe_until - now, 'open')
  end
  redis.call('HSET', KEYS[1], 'probe', ARGV[1], 'probe_until', now + ARGV[2], 'failures', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'probe', 0, ''}
end
local failures = tonumber(h.failures) or 0
if awaiting > 0 and failures + awaiting >= tonumber(ARGV[4]) then
  local wait = tonumber(ARGV[6])
  if failures > 0 then wait = math.max(wait, first - now) end
  return hold(wait, 'busy')
end
redis.call('HSET', KEYS[1], 'a:' .. ARGV[1], now + ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'pass', 0, ''}
"""
# ARGV: '1' failed, '0' answered or '-' no request made (only the token's place, or its
# probe, is freed), token or '', threshold, cool-off (ms), expiry (ms), throttle (ms,
# '0' for none).  Returns 3 when a success closed it or freed a place while holds
# it answered still run (release some), 2 when it is closed after a success and nothing
# is held (trust it), 1 for a failure or a throttle, 0 if ignored.
RECORD_LUA = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if ARGV[2] ~= '' then redis.call('HDEL', KEYS[1], 'a:' .. ARGV[2]) end
if ARGV[1] == '-' then
  if ARGV[2] ~= '' and redis.call('HGET', KEYS[1], 'probe') == ARGV[2] then
    redis.call('HDEL', KEYS[1], 'probe', 'probe_until')
  end
  return 0
end
local s = redis.call('HMGET', KEYS[1], 'failures', 'open_until', 'probe', 'held_until',
  'throttled_until')
if s[2] and (ARGV[2] == '' or s[3] ~= ARGV[2]) then return 0 end
local throttle = tonumber(ARGV[6])
if ARGV[1] == '1' then
  local failures = (tonumber(s[1]) or 0) + 1
  if s[2] or failures >= tonumber(ARGV[3]) then
    redis.call('HSET', KEYS[1], 'failures', failures, 'open_until', now + ARGV[4])
    redis.call('HDEL', KEYS[1], 'probe', 'probe_until')
  else
    redis.call('HSET', KEYS[1], 'failures', failures)
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return 1
end
if s[1] or s[2] then
  redis.call('HDEL', KEYS[1], 'failures', 'open_until', 'probe', 'probe_until')
end
if throttle > 0 then
  redis.call('HSET', KEYS[1], 'throttled_until', now + throttle)
  if now + throttle > (tonumber(s[4]) or 0) then
    redis.call('HSET', KEYS[1], 'held_until', now + throttle)
  end
  redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[5]), throttle))
  return 1
end
if now < (tonumber(s[5]) or 0) then return 1 end
if now < (tonumber(s[4]) or 0) then return 3 end
return 2
"""
