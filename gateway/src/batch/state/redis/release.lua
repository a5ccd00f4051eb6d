-- Gives lines back unanswered: each leased one loses its lease and is claimed first next.
--
-- KEYS[1]: leases (zset), KEYS[2]: returned (zset, score = line).
-- ARGV: the line indices.
for _, line in ipairs(ARGV) do
  if redis.call('ZREM', KEYS[1], line) == 1 then
    redis.call('ZADD', KEYS[2], line, line)
  end
end
return 1
