"""The two Lua scripts that space requests to a host kept in Redis, atomically between
processes: ``TAKE_LUA`` for each delivery's turn, ``NOTE_LUA`` for a throttle, or a
breaker that closed or a pause that ended.  They mirror
:mod:`django_outbox.breakers.rates` (its unit tests and the integration tests hold them
to it), in milliseconds of Redis's ``TIME``.
"""

from django_outbox.breakers.rates import UNLIMITED_DOUBLINGS

# A hash per host: tat (ms: its next free time), ramp_at (ms: when its ramp begins) and
# ramp_from (its rate then, per second).  ARGV[1..3] of both scripts: the steady rate per
# second ('' for none), the floor per second, the slow start (ms).
_PROLOGUE = f"""
local t = redis.call('TIME')
local now = t[1] * 1000 + t[2] / 1000
local s = redis.call('HMGET', KEYS[1], 'tat', 'ramp_at', 'ramp_from')
local rate, floor, span = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(s[1]) or now
local ramp_at, ramp_from = tonumber(s[2]), tonumber(s[3])
if ramp_at and now - ramp_at >= span then ramp_at = nil end
local function rate_at(x)
  if not ramp_at then return rate end
  local elapsed = x - ramp_at
  if elapsed < 0 then return 0 end
  if elapsed >= span then return rate end
  local share = elapsed / span
  if not rate then return ramp_from * 2 ^ ({UNLIMITED_DOUBLINGS} * share) end
  if rate <= ramp_from then return rate end
  return ramp_from * (rate / ramp_from) ^ share
end
local function share_now()
  if not ramp_at or span <= 0 then return 1000 end
  return math.floor((now - ramp_at) * 1000 / span)
end
local function keep()
  if not ramp_at and tat <= now then
    redis.call('DEL', KEYS[1])
    return
  end
  local until_ms = tat
  if ramp_at then
    redis.call('HSET', KEYS[1], 'ramp_at', string.format('%.3f', ramp_at),
      'ramp_from', string.format('%.6f', ramp_from))
    until_ms = math.max(until_ms, ramp_at + span)
  else
    redis.call('HDEL', KEYS[1], 'ramp_at', 'ramp_from')
  end
  redis.call('HSET', KEYS[1], 'tat', string.format('%.3f', tat))
  redis.call('PEXPIRE', KEYS[1], math.ceil(until_ms - now) + 1000)
end
"""

# ARGV[4]: how far away (ms) a turn may be reserved.  Returns {1 reserved or 0, the wait
# (ms), 1 if the host is limited or ramping or 0, the ramp's share done now in 1/1000}.
TAKE_LUA = (
    _PROLOGUE
    + """
local within = tonumber(ARGV[4])
local at = math.max(now, tat, ramp_at or now)
local r = rate_at(at)
local reserved = 0
if not r then
  at = math.max(now, ramp_at or now)
  if at - now <= within then reserved = 1 end
elseif at - now <= within then
  reserved = 1
  tat = at + 1000 / r
end
keep()
local limited = 0
if rate or ramp_at then limited = 1 end
return {reserved, math.ceil(at - now), limited, share_now()}
"""
)

# ARGV[4]: 'slow' (a throttle) or 'start' (a breaker closed or a pause ended); ARGV[5]:
# the hold (ms), or how long ago (ms) the slow start began.  Returns the ramp's share
# done now in 1/1000.
NOTE_LUA = (
    _PROLOGUE
    + """
if ARGV[4] == 'slow' then
  local current = rate_at(now)
  if ramp_at and ramp_at > now then current = ramp_from end
  local start = floor
  if current and current > 0 then start = math.max(floor, current / 2) end
  ramp_at, ramp_from = math.max(now + tonumber(ARGV[5]), ramp_at or now), start
else
  local began = now - tonumber(ARGV[5])
  ramp_at, ramp_from = math.max(began, ramp_at or began), floor
end
keep()
return share_now()
"""
)
