-- Takes amounts from continuously refilling token buckets, all or none, atomically on the
-- server (one script run: no read-modify-write race between gateway pods).
--
-- KEYS[i]: bucket i, a hash {level, at} (units left, server time in ms when written).
-- ARGV[1]: "1" to take even past empty (settlements), else "0".
-- ARGV[2i], ARGV[2i+1]: bucket i's quota per minute (also its capacity) and the amount to take
-- (negative gives back, never past the capacity).
-- Returns {taken (1/0), then per bucket: units left (whole), ms until full, ms until the
-- amount would fit (0 when taken)}. The clock is the server's: pods' clocks may disagree.
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local force = ARGV[1] == '1'
local levels = {}
local fits = true
for i, key in ipairs(KEYS) do
  local quota = tonumber(ARGV[2 * i])
  local amount = tonumber(ARGV[2 * i + 1])
  local saved = redis.call('HMGET', key, 'level', 'at')
  local level = tonumber(saved[1])
  if level == nil then
    level = quota
  else
    local at = tonumber(saved[2]) or now_ms
    level = math.min(quota, level + math.max(0, now_ms - at) * quota / 60000)
  end
  levels[i] = level
  if amount > 0 and (level < amount or amount > quota) then
    fits = false
  end
end
local taken = fits or force
local out = {taken and 1 or 0}
for i, key in ipairs(KEYS) do
  local quota = tonumber(ARGV[2 * i])
  local amount = tonumber(ARGV[2 * i + 1])
  local per_ms = quota / 60000
  local level = levels[i]
  local wait = 0
  if taken then
    level = math.min(quota, level - amount)
    redis.call('HSET', key, 'level', string.format('%.17g', level), 'at', now_ms)
    -- A bucket left alone until full is the same as no bucket: let Redis forget it then.
    redis.call('PEXPIRE', key, math.ceil((quota - level) / per_ms) + 1000)
  elseif level < amount then
    wait = math.ceil((amount - level) / per_ms)
  end
  out[#out + 1] = math.max(0, math.floor(level))
  out[#out + 1] = math.ceil(math.max(0, quota - level) / per_ms)
  out[#out + 1] = wait
end
return out
