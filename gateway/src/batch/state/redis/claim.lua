-- Hands up to `max` lines of one batch to one caller, atomically (no two pods get a line).
--
-- KEYS[1]: leases, a zset (member: line index, score: lease end in ms since the epoch).
-- KEYS[2]: returned, a zset of lines given back unanswered (score: the line, so the lowest
--          comes first).
-- KEYS[3]: results, a hash (line index -> result JSON): a line in it is answered.
-- KEYS[4]: cursor, the next line never handed out.
-- ARGV: now_ms, lease end in ms, total lines, max lines to claim.
-- Returns the claimed line indices. The clock is the caller's (`now_ms`): leases are coarse
-- (tens of seconds), so pods' clocks agreeing within a second is enough.
local leases, returned, results, cursor_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = tonumber(ARGV[1])
local until_ms = tonumber(ARGV[2])
local total = tonumber(ARGV[3])
local max = tonumber(ARGV[4])

-- A lease that ran out (its pod died or stalled) puts its line back first.
for _, line in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now)) do
  redis.call('ZREM', leases, line)
  redis.call('ZADD', returned, line, line)
end

local claimed = {}
local function free(line)
  return redis.call('HEXISTS', results, line) == 0 and not redis.call('ZSCORE', leases, line)
end
local function take(line)
  redis.call('ZADD', leases, until_ms, line)
  claimed[#claimed + 1] = tonumber(line)
end

while #claimed < max do
  local popped = redis.call('ZPOPMIN', returned)
  if #popped == 0 then
    break
  end
  local line = popped[1]
  if tonumber(line) < total and free(line) then
    take(line)
  end
end

local cursor = tonumber(redis.call('GET', cursor_key) or '0')
local start = cursor
while #claimed < max and cursor < total do
  local line = string.format('%d', cursor)
  cursor = cursor + 1
  if free(line) then
    take(line)
  end
end
if cursor ~= start then
  redis.call('SET', cursor_key, string.format('%d', cursor))
end
return claimed
