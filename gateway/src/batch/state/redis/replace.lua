-- Compare-and-set of a batch record: replaced only if the stored version is the new one's
-- minus one (another pod's change in between makes this one fail; it reads and retries).
--
-- KEYS[1]: the record, a hash {version, json, status}. ARGV: new version, JSON, status.
-- Returns 1 when replaced, 0 otherwise (also when there is no record).
local stored = redis.call('HGET', KEYS[1], 'version')
if not stored or tonumber(stored) + 1 ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'json', ARGV[2], 'status', ARGV[3])
return 1
