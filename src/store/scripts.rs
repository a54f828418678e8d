//! The store's Lua scripts, each one atomic operation on one session's keys (or the cache's).
//! KEYS and ARGV are listed above each; the Rust side that calls it is named there too.

/// The Lua that keeps a session's data keys (KEYS 2 on) alive past its meta (KEYS[1]): their
/// expiry is set to twice the idle TTL and recorded in the meta's `data_until`, and renewed only
/// when that is less than one TTL away, so a batch does not refresh five expiries, but a live
/// session's data never expires before its meta does. Every data key made later is given the
/// same expiry as it is made. Expects locals `now`, `ttl`, `data_ttl` and `data_until`.
macro_rules! keep_data {
    () => {
        r"
local function keep_data()
  if data_until - now >= ttl then return end
  for i = 2, #KEYS do redis.call('PEXPIRE', KEYS[i], data_ttl) end
  redis.call('HSET', KEYS[1], 'data_until', string.format('%.0f', now + data_ttl))
end
"
    };
}

/// Opens the session, refreshes its expiry and returns whether it was made now and its
/// generation (random, drawn when it was made: a batch's later writes name it, so none lands in
/// a session ended, evicted or expired meanwhile, or in another made under the same id since).
/// A session is alive while its meta is; one made now drops whatever data keys an expired one of
/// the same id left behind. `store/session.rs` `load` runs it only when its reads found no live
/// session, or data keys due for renewal (`keep_data`): most batches open their session with
/// reads alone (and a `PEXPIRE` of the meta, bounded by its data keys, once it has used an
/// eighth of its TTL). A `GETRANGE` of the window follows it in the same round trip: read inside
/// Lua, the window (a few KiB) cost Redis more than the rest of the script (BENCHMARKS.md §23),
/// and a read after the script sees this session or a newer state of it, never an older one.
/// `used_ms` is written for replicas of earlier releases, whose cap evicts by it; this one
/// evicts by the meta's time left.
/// KEYS: meta, window, memory, files, dirs, answers. ARGV: idle TTL (ms), now (ms since the
/// epoch), tenant, id, a fresh generation, the data keys' TTL (ms).
pub(super) const LOAD: &str = concat!(
    r"
local ttl, now, data_ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[6])
local meta = redis.call('HMGET', KEYS[1], 'generation', 'data_until')
local generation, data_until = meta[1], tonumber(meta[2] or '0')
",
    keep_data!(),
    r"
local created = 0
if not generation then
  created, generation = 1, ARGV[5]
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
  redis.call('HSET', KEYS[1], 'generation', generation, 'created_ms', ARGV[2], 'used_ms', ARGV[2],
    'tenant', ARGV[3], 'id', ARGV[4], 'data_until', string.format('%.0f', now + data_ttl))
else
  keep_data()
end
redis.call('PEXPIRE', KEYS[1], ttl)
return {created, generation}
"
);

/// Replays a batch's window changes in order ('p' + slot: append; 'c' + call: remove that
/// call's slots), appends the memory entries, refreshes the expiry; 1. A session that is not
/// the generation the batch loaded keeps nothing: 0. The memory list is cut to its newest
/// entries once it holds an eighth more (`MEMORY` reads only the newest), so most saves skip
/// the `LTRIM`.
/// The window is one string of fixed-size slots, appended to (one APPEND for a run of pushes, no
/// read) and cut to its newest `window` slots once it holds twice that: what a batch loads ends
/// with the same window as trimming at every push would leave. A clear trims first, so it never
/// brings back slots the window had let go. `store/session.rs` `save`.
/// The meta counts the memory entries' bytes (`memory_bytes`) and what the tenant's memory
/// ledger granted the session (`memory_allowed`, raised by `grant`). In `keep` mode, entries
/// that would take the session past its allowance change nothing and answer the bytes missing,
/// negated; the caller reserves them in the ledger and saves again with the grant, or in `drop`
/// mode, which saves everything but the entries (`free`: no tenant bound).
/// KEYS: meta, window, memory, files, dirs, answers. ARGV: the generation, idle TTL (ms), now
/// (ms since the epoch), the data keys' TTL (ms), window (slots), memory entries kept, slot
/// bytes, bytes granted now, the memory mode (`keep`, `drop`, `free`), the number of window
/// changes, the changes, then the memory entries.
pub(super) const SAVE: &str = concat!(
    r"
local meta = redis.call('HMGET', KEYS[1], 'generation', 'data_until', 'memory_bytes', 'memory_allowed')
if meta[1] ~= ARGV[1] then return 0 end
local ttl, now, data_ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local data_until = tonumber(meta[2] or '0')
local held, grant, mode = tonumber(meta[3] or '0'), tonumber(ARGV[8]), ARGV[9]
local slot, n = tonumber(ARGV[7]), tonumber(ARGV[10])
local first = 11 + n
if mode == 'drop' then first = #ARGV + 1 end
local adding = 0
for j = first, #ARGV do adding = adding + #ARGV[j] end
if mode == 'keep' and adding > 0 then
  local allowed = tonumber(meta[4] or '0') + grant
  if held + adding > allowed then return -(held + adding - allowed) end
end
if grant > 0 then redis.call('HINCRBY', KEYS[1], 'memory_allowed', grant) end
",
    keep_data!(),
    r"
local keep = tonumber(ARGV[5]) * slot
local pushed = {}
local function flush()
  if #pushed == 0 then return end
  local added = table.concat(pushed)
  pushed = {}
  local len = redis.call('APPEND', KEYS[2], added)
  if len == #added then redis.call('PEXPIRE', KEYS[2], data_ttl) end
  if len >= 2 * keep then
    redis.call('SET', KEYS[2], redis.call('GETRANGE', KEYS[2], -keep, -1), 'KEEPTTL')
  end
end
for i = 11, 10 + n do
  local kind, body = string.sub(ARGV[i], 1, 1), string.sub(ARGV[i], 2)
  if kind == 'p' then
    pushed[#pushed + 1] = body
  else
    flush()
    local window = redis.call('GET', KEYS[2]) or ''
    if #window > keep then window = string.sub(window, -keep) end
    local kept = {}
    for at = 1, #window, slot do
      local one = string.sub(window, at, at + slot - 1)
      if string.sub(one, 1, 16) ~= body then kept[#kept + 1] = one end
    end
    if #kept == 0 then
      redis.call('DEL', KEYS[2])
    else
      redis.call('SET', KEYS[2], table.concat(kept), 'KEEPTTL')
    end
  end
end
flush()
if first <= #ARGV then
  local len = 0
  for j = first, #ARGV, 500 do
    len = redis.call('RPUSH', KEYS[3], unpack(ARGV, j, math.min(j + 499, #ARGV)))
  end
  if len == #ARGV - first + 1 then redis.call('PEXPIRE', KEYS[3], data_ttl) end
  local entries = tonumber(ARGV[6])
  if len > entries + math.max(1, math.floor(entries / 8)) then
    for _, gone in ipairs(redis.call('LRANGE', KEYS[3], 0, len - entries - 1)) do
      adding = adding - #gone
    end
    redis.call('LTRIM', KEYS[3], -entries, -1)
  end
  redis.call('HSET', KEYS[1], 'memory_bytes', math.max(0, held + adding))
end
keep_data()
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
"
);

/// The newest memory entries of a live session, or nil. KEYS: meta, memory. ARGV: memory
/// entries kept.
pub(super) const MEMORY: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return redis.call('LRANGE', KEYS[2], -tonumber(ARGV[1]), -1)
";

/// Writes a scratch file within the session's quota (content bytes plus one entry's bytes per
/// file and per directory, as on disk), making its parent directories; answers `ok` and how
/// many bytes the session's files grew by (negative: shrank).
/// A session that is not the generation the batch loaded is not written: `gone`.
/// With the tenant's bound reached (`tenant_ledger` granted nothing), a write that would grow the
/// session's files is refused: `tenant`.
/// `store/scratch.rs` `write`.
/// The files and directories keys get the data keys' expiry (see `keep_data`); the meta's is
/// renewed by the batch's save.
/// KEYS: meta, files, dirs. ARGV: path, content, quota (0: none), entry bytes, the data keys'
/// TTL (ms), the generation, '1' when the write may not grow the files.
pub(super) const WRITE: &str = r"
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[6] then return {'gone'} end
local path, content = ARGV[1], ARGV[2]
local quota, entry = tonumber(ARGV[3]), tonumber(ARGV[4])
if redis.call('SISMEMBER', KEYS[3], path) == 1 then return {'isdir'} end
local new_dirs, at = {}, 0
while true do
  at = string.find(path, '/', at + 1, true)
  if not at then break end
  local parent = string.sub(path, 1, at - 1)
  if redis.call('HEXISTS', KEYS[2], parent) == 1 then return {'notdir'} end
  if redis.call('SISMEMBER', KEYS[3], parent) == 0 then new_dirs[#new_dirs + 1] = parent end
end
local used = tonumber(redis.call('HGET', KEYS[1], 'scratch_bytes') or '0')
local needed = used - redis.call('HSTRLEN', KEYS[2], path) + #content + #new_dirs * entry
if redis.call('HEXISTS', KEYS[2], path) == 0 then needed = needed + entry end
-- As on disk, a write that takes no more than it replaces is never refused.
if quota > 0 and needed > used and needed > quota then return {'quota', tostring(needed)} end
if ARGV[7] == '1' and needed > used then return {'tenant'} end
redis.call('HSET', KEYS[2], path, content)
if #new_dirs > 0 then redis.call('SADD', KEYS[3], unpack(new_dirs)) end
redis.call('HSET', KEYS[1], 'scratch_bytes', needed)
for i = 2, 3 do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
return {'ok', tostring(needed - used)}
";

// A tenant's scratch bytes in the store, across the fleet: its total, and what each of its
// sessions (by id, with the generation charged) holds of it, so the bytes of a session that
// ended or expired can be given back. A write first reserves the most it can add here
// (`TENANT_RESERVE`), then writes (`WRITE`, on the session's own keys, perhaps another shard),
// then settles the reservation to what it did add (`TENANT_SETTLE`): the bound holds at every
// moment, and a replica that dies between leaves bytes charged, never missing, until its
// session goes. Each is one atomic script on the tenant's keys (one hash tag, one slot).

/// Reserves bytes for session `id` of `generation` within the tenant's bound: 1 if granted, 0
/// if the total would pass it. A generation other than the one charged (the id's session ended
/// and was made again) gives the old one's bytes back first. `store/scratch.rs` `reserve`.
/// KEYS: held (hash id → bytes), generations (hash id → generation), total. ARGV: id,
/// generation, bytes, the bound, the keys' TTL (ms).
pub(super) const TENANT_RESERVE: &str = r"
local id, generation = ARGV[1], ARGV[2]
local want, bound = tonumber(ARGV[3]), tonumber(ARGV[4])
local total = tonumber(redis.call('GET', KEYS[3]) or '0')
if redis.call('HGET', KEYS[2], id) ~= generation then
  total = math.max(0, total - tonumber(redis.call('HGET', KEYS[1], id) or '0'))
  redis.call('HSET', KEYS[1], id, 0)
  redis.call('HSET', KEYS[2], id, generation)
end
local granted = 0
if total + want <= bound then
  redis.call('HINCRBY', KEYS[1], id, want)
  total, granted = total + want, 1
end
redis.call('SET', KEYS[3], string.format('%.0f', total), 'PX', ARGV[5])
for i = 1, 2 do redis.call('PEXPIRE', KEYS[i], ARGV[5]) end
return granted
";

/// Corrects session `id`'s charge by a signed number of bytes (what a write added, less what it
/// reserved), if `generation` is still the one charged; never below zero.
/// `store/scratch.rs` `settle`. KEYS: as `TENANT_RESERVE`. ARGV: id, generation, the correction,
/// the keys' TTL (ms).
pub(super) const TENANT_SETTLE: &str = r"
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
local by = tonumber(ARGV[3])
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if held + by < 0 then by = -held end
redis.call('HINCRBY', KEYS[1], ARGV[1], by)
local total = math.max(0, tonumber(redis.call('GET', KEYS[3]) or '0') + by)
redis.call('SET', KEYS[3], string.format('%.0f', total), 'PX', ARGV[4])
return 1
";

/// Gives back everything session `id` holds, if it is charged as `generation` ('': whichever):
/// it ended, expired or was evicted. `store/scratch.rs` `release`. KEYS: as `TENANT_RESERVE`.
/// ARGV: id, generation or '', the keys' TTL (ms).
pub(super) const TENANT_RELEASE: &str = r"
local charged = redis.call('HGET', KEYS[2], ARGV[1])
if not charged or (ARGV[2] ~= '' and charged ~= ARGV[2]) then return 0 end
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local total = math.max(0, tonumber(redis.call('GET', KEYS[3]) or '0') - held)
redis.call('SET', KEYS[3], string.format('%.0f', total), 'PX', ARGV[3])
return 1
";

/// Reads a scratch file. KEYS: files, dirs. ARGV: path.
pub(super) const READ: &str = r"
local content = redis.call('HGET', KEYS[1], ARGV[1])
if content then return {'ok', content} end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return {'isdir'} end
return {'missing'}
";

/// Lists a scratch directory's entries as name, kind pairs, at most ARGV[2] of them.
/// KEYS: files, dirs. ARGV: the directory ('' for the root), the most entries.
pub(super) const LIST: &str = r"
local dir, max = ARGV[1], tonumber(ARGV[2])
if dir ~= '' and redis.call('SISMEMBER', KEYS[2], dir) == 0 then
  if redis.call('HEXISTS', KEYS[1], dir) == 1 then return {'notdir'} end
  return {'missing'}
end
local prefix = dir == '' and '' or dir .. '/'
local out = {'ok'}
local function take(names, kind)
  for _, path in ipairs(names) do
    if #out > max * 2 then return end
    if string.sub(path, 1, #prefix) == prefix then
      local rest = string.sub(path, #prefix + 1)
      if not string.find(rest, '/', 1, true) then
        out[#out + 1] = rest
        out[#out + 1] = kind
      end
    end
  end
end
take(redis.call('HKEYS', KEYS[1]), 'file')
take(redis.call('SMEMBERS', KEYS[2]), 'dir')
return out
";

/// A cache entry and the epoch of the path it reads. `store/cache.rs` `get`.
/// KEYS: entry, [the path's epoch].
pub(super) const CACHE_GET: &str = r"
local epoch = '0'
if KEYS[2] then epoch = redis.call('GET', KEYS[2]) or '0' end
return {redis.call('GET', KEYS[1]) or '', epoch}
";

/// Stores a cache entry, and with a path, unless the path's epoch moved since the lookup,
/// indexed under it. The index forgets entries that expired once it holds over 1024, so it is
/// bounded by the path's live entries. `store/cache.rs` `put`.
/// KEYS: entry, [path index, the path's epoch]. ARGV: the entry, the epoch at the lookup,
/// TTL (ms).
pub(super) const CACHE_PUT: &str = r"
if KEYS[2] then
  if (redis.call('GET', KEYS[3]) or '0') ~= ARGV[2] then return 0 end
  if redis.call('SCARD', KEYS[2]) > 1024 then
    for _, entry in ipairs(redis.call('SMEMBERS', KEYS[2])) do
      if redis.call('EXISTS', entry) == 0 then redis.call('SREM', KEYS[2], entry) end
    end
  end
  redis.call('SADD', KEYS[2], KEYS[1])
  if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then redis.call('PEXPIRE', KEYS[2], ARGV[3]) end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
";

/// Drops every entry indexed under a path and moves the path's epoch, so a result of it
/// computed across this on any server is not stored. The epoch outlives the entries it
/// guards: ARGV[1]. `store/cache.rs` `invalidate`.
/// KEYS: path index, the path's epoch. ARGV: how long the epoch is kept (ms). (The entries
/// share the index's tag.)
pub(super) const CACHE_INVALIDATE: &str = r"
redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
local entries = redis.call('SMEMBERS', KEYS[1])
for i = 1, #entries, 500 do
  redis.call('DEL', unpack(entries, i, math.min(i + 499, #entries)))
end
redis.call('DEL', KEYS[1])
return #entries
";

/// Takes a pending approval, once: with an answer (kept for its server to find) it is claimed
/// as answered; with '' (expired, withdrawn) it is just taken out. 1: taken now; 2: answered
/// before; 0: not pending. `store/approvals.rs` `claim`.
/// KEYS: pending, answered, the tenant's index. ARGV: the answer or '', how long an answer is
/// kept (ms), the id.
pub(super) const APPROVAL_CLAIM: &str = r"
if redis.call('DEL', KEYS[1]) == 1 then
  if ARGV[1] ~= '' then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2]) end
  redis.call('SREM', KEYS[3], ARGV[3])
  return 1
end
if redis.call('EXISTS', KEYS[2]) == 1 then return 2 end
return 0
";
