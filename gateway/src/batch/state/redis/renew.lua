-- Extends leases that still exist (a line answered, given back or taken over in between has
-- none, and gets none back).
--
-- KEYS[1]: leases (zset). ARGV[1]: the new lease end in ms; ARGV[2..]: the line indices.
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[i])
end
return 1
