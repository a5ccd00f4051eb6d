//! The Lua scripts of the Redis batch state: the ones that keep the contract (claims, leases,
//! first answer wins, compare-and-set) in files beside this one, one-line reads and writes
//! inline. Each touches keys of one slot only (see `keys`).

use std::sync::LazyLock;

/// Every script, hashed once per process (calls are EVALSHA, loading on first use).
pub(super) struct Scripts {
    pub(super) claim: redis::Script,
    pub(super) release: redis::Script,
    pub(super) renew: redis::Script,
    pub(super) record: redis::Script,
    pub(super) replace: redis::Script,
    pub(super) get: redis::Script,
    pub(super) set: redis::Script,
    pub(super) put_record: redis::Script,
    pub(super) get_record: redis::Script,
    pub(super) add: redis::Script,
    pub(super) remove: redis::Script,
    pub(super) newest_first: redis::Script,
    pub(super) oldest_first: redis::Script,
    pub(super) delete: redis::Script,
    pub(super) progress: redis::Script,
    pub(super) leased: redis::Script,
    pub(super) results_page: redis::Script,
}

pub(super) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let inline = redis::Script::new;
    Scripts {
        claim: inline(include_str!("claim.lua")),
        release: inline(include_str!("release.lua")),
        renew: inline(include_str!("renew.lua")),
        record: inline(include_str!("record.lua")),
        replace: inline(include_str!("replace.lua")),
        get: inline("return redis.call('GET', KEYS[1])"),
        set: inline("return redis.call('SET', KEYS[1], ARGV[1])"),
        put_record: inline(
            "return redis.call('HSET', KEYS[1], 'version', ARGV[1], 'json', ARGV[2], 'status', \
             ARGV[3])",
        ),
        get_record: inline("return redis.call('HGET', KEYS[1], 'json')"),
        add: inline("return redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])"),
        remove: inline("for _, m in ipairs(ARGV) do redis.call('ZREM', KEYS[1], m) end return 1"),
        newest_first: inline("return redis.call('ZREVRANGE', KEYS[1], 0, -1)"),
        oldest_first: inline("return redis.call('ZRANGE', KEYS[1], 0, -1)"),
        delete: inline("for _, k in ipairs(KEYS) do redis.call('DEL', k) end return 1"),
        progress: inline(
            "return redis.call('HMGET', KEYS[1], 'completed', 'failed', 'prompt_tokens', \
             'cached_tokens', 'completion_tokens')",
        ),
        leased: inline("return redis.call('ZCOUNT', KEYS[1], '(' .. ARGV[1], '+inf')"),
        results_page: inline("return redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])"),
    }
});
