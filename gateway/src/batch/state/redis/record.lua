-- Records one line's result if it has none yet (the first answer wins) and its batch still
-- runs, and only then drops its lease and counts it, in the same step: progress never counts
-- a line twice.
--
-- KEYS[1]: results (hash line -> JSON), KEYS[2]: leases (zset), KEYS[3]: progress (hash),
-- KEYS[4]: the batch record (hash: its `status`).
-- ARGV: line index, result JSON, "1" if answered with a 2xx, prompt tokens, cached tokens,
-- completion tokens.
-- Returns 1 when recorded, 0 when the line already had a result or its batch has ended.
-- An answer after the batch ended (expired, cancelled) is too late: its files are written.
local status = redis.call('HGET', KEYS[4], 'status')
if status ~= 'in_progress' and status ~= 'cancelling' then
  return 0
end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[3], ARGV[3] == '1' and 'completed' or 'failed', 1)
redis.call('HINCRBY', KEYS[3], 'prompt_tokens', ARGV[4])
redis.call('HINCRBY', KEYS[3], 'cached_tokens', ARGV[5])
redis.call('HINCRBY', KEYS[3], 'completion_tokens', ARGV[6])
return 1
