#include "pool_store.hpp"

#include "core/checksum.hpp"
#include "core/error.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace ferry::pagesrv {

using pool::status;
using pool::tier;

namespace {

// memcpy, except that an empty copy may name null pointers (an empty span's
// data()), which memcpy must not be given.
void copy_bytes(void* dst, const void* src, size_t n) noexcept {
    if (n)
        std::memcpy(dst, src, n);
}

} // namespace

uint64_t parse_size(const std::string& text) {
    size_t used = 0;
    uint64_t v = 0;
    try {
        v = std::stoull(text, &used);
    } catch (const std::exception&) {
        throw error(fmt::format("'{}' is not a size (e.g. 64M, 1G, 4096)", text));
    }
    const std::string unit = text.substr(used);
    uint64_t mul = 1;
    if (unit == "K" || unit == "k")
        mul = 1ull << 10;
    else if (unit == "M" || unit == "m")
        mul = 1ull << 20;
    else if (unit == "G" || unit == "g")
        mul = 1ull << 30;
    else if (!unit.empty())
        throw error(fmt::format("'{}' is not a size (units: K, M, G)", text));
    return v * mul;
}

namespace {
uint32_t slots_of(const pool_store_config& cfg) {
    if (cfg.chunk_size == 0 || cfg.chunk_size > pool::max_data_len || cfg.chunk_size % 512)
        throw error(fmt::format("pool chunk size {} must be a multiple of 512 up to {}",
                                cfg.chunk_size, pool::max_data_len));
    const uint64_t slots = cfg.capacity_bytes / cfg.chunk_size;
    if (slots == 0 || slots > UINT32_MAX)
        throw error(fmt::format("pool capacity {} holds no {}-byte chunk (or too many)",
                                cfg.capacity_bytes, cfg.chunk_size));
    return uint32_t(slots);
}
} // namespace

pool_store::pool_store(pool_store_config cfg)
    : _cfg(std::move(cfg)), _slots(slots_of(_cfg)), _directory(_slots) {
    // Populated now, so that storing a chunk never waits for a page fault.
    _arena_map = mapping::anonymous(size_t(_slots) * _cfg.chunk_size,
                                    fmt::format("a pool arena of {} bytes", _cfg.capacity_bytes),
                                    MAP_POPULATE);
    _arena = _arena_map.data();
    _arena_meta.resize(size_t(_slots) * pool::max_meta_len);
    _arena_keys.resize(_slots);
    _arena_free.reserve(_slots);
    for (uint32_t s = _slots; s-- > 0;)
        _arena_free.push_back(s);
    _policy = make_eviction_policy(_cfg.eviction, _slots);
    _index.reserve(size_t(_slots) * 2);

    std::filesystem::create_directories(_cfg.tier_dir);
    // One file per store: tests and benchmarks run several in one process.
    static std::atomic<uint32_t> stores{0};
    _tier_path = _cfg.tier_dir / fmt::format("pool-{}-{}.tier", ::getpid(), stores++);
    int fd = ::open(_tier_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0600);
    _direct = fd >= 0;
    if (fd < 0) // tmpfs and some others refuse O_DIRECT
        fd = ::open(_tier_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        throw sys_error("open disk tier " + _tier_path.string());
    _tier.reset(fd);
    // Page aligned, as O_DIRECT wants.
    _io_map = mapping::anonymous(_cfg.chunk_size, "the disk tier's buffer");
    _io = _io_map.data();
}

pool_store::~pool_store() {
    std::error_code ec;
    std::filesystem::remove(_tier_path, ec);
}

std::byte* pool_store::meta_of(const entry& e) noexcept {
    auto& v = e.where == tier::memory ? _arena_meta : _disk_meta;
    return v.data() + size_t(e.slot) * pool::max_meta_len;
}

status pool_store::take_disk_slot(uint32_t& slot) {
    if (!_disk_free.empty()) {
        slot = _disk_free.back();
        _disk_free.pop_back();
        return status::ok;
    }
    if (_cfg.disk_capacity_bytes &&
        uint64_t(_disk_slots + 1) * _cfg.chunk_size > _cfg.disk_capacity_bytes)
        return status::no_space;
    slot = _disk_slots++;
    _disk_meta.resize(size_t(_disk_slots) * pool::max_meta_len);
    return status::ok;
}

// Moves the policy's victim from the arena to the disk tier.
status pool_store::evict_one() {
    const auto victim = _policy->victim();
    if (!victim)
        return status::no_space;
    const key k = _arena_keys[*victim];
    entry& e = _index.at(k);
    uint32_t dslot = 0;
    if (auto st = take_disk_slot(dslot); st != status::ok) {
        _policy->stored(*victim); // keep it resident after all
        return st;
    }
    copy_bytes(_io, arena_slot(*victim), _cfg.chunk_size);
    const ssize_t n = ::pwrite(_tier.get(), _io, _cfg.chunk_size, off_t(dslot) * _cfg.chunk_size);
    if (n != ssize_t(_cfg.chunk_size)) {
        _disk_free.push_back(dslot);
        _policy->stored(*victim);
        return status::io_error;
    }
    copy_bytes(_disk_meta.data() + size_t(dslot) * pool::max_meta_len,
               _arena_meta.data() + size_t(*victim) * pool::max_meta_len, e.meta_len);
    _directory.unpublish(k.object, k.chunk);
    e.where = tier::disk;
    e.slot = dslot;
    _arena_free.push_back(*victim);
    _c.evictions++;
    return status::ok;
}

status pool_store::take_arena_slot(uint32_t& slot) {
    if (_arena_free.empty())
        if (auto st = evict_one(); st != status::ok)
            return st;
    slot = _arena_free.back();
    _arena_free.pop_back();
    return status::ok;
}

void pool_store::free_slot(const entry& e) noexcept {
    if (e.where == tier::memory) {
        const key k = _arena_keys[e.slot];
        _directory.unpublish(k.object, k.chunk);
        _policy->removed(e.slot);
        _arena_free.push_back(e.slot);
    } else {
        _disk_free.push_back(e.slot);
    }
}

status pool_store::put(uint64_t object, uint64_t chunk, std::span<const std::byte> meta,
                       std::span<const std::byte> data) {
    if (meta.size() > pool::max_meta_len || data.size() > _cfg.chunk_size)
        return status::bad_request;
    std::lock_guard lock(_mutex);
    const key k{object, chunk};
    if (auto it = _index.find(k); it != _index.end()) {
        free_slot(it->second);
        _index.erase(it);
    }
    uint32_t slot = 0;
    if (auto st = take_arena_slot(slot); st != status::ok)
        return st;
    copy_bytes(arena_slot(slot), data.data(), data.size());
    copy_bytes(_arena_meta.data() + size_t(slot) * pool::max_meta_len, meta.data(), meta.size());
    _arena_keys[slot] = k;
    const entry& e = _index[k] =
        entry{tier::memory, slot, uint32_t(meta.size()), uint32_t(data.size()),
              pool::chunk_checksum(data.data(), uint32_t(data.size()), meta.data(),
                                   uint32_t(meta.size()))};
    (void)_directory.publish(object, chunk, slot, e.data_len, e.meta_len, e.checksum);
    _policy->stored(slot);
    _c.puts++;
    return status::ok;
}

status pool_store::get(uint64_t object, uint64_t chunk, std::byte* meta, uint32_t& meta_len,
                       std::byte* data, uint32_t& data_len, tier& served_from) {
    std::lock_guard lock(_mutex);
    auto it = _index.find(key{object, chunk});
    if (it != _index.end() && it->second.where == tier::memory) {
        _c.memory_hits++;
        entry& e = it->second;
        _policy->accessed(e.slot);
        copy_bytes(data, arena_slot(e.slot), e.data_len);
        copy_bytes(meta, meta_of(e), e.meta_len);
        meta_len = e.meta_len;
        data_len = e.data_len;
        served_from = tier::memory;
        return status::ok;
    }
    _c.memory_misses++;
    if (it == _index.end()) {
        _c.disk_misses++;
        return status::not_found;
    }
    entry& e = it->second;
    const ssize_t n = ::pread(_tier.get(), _io, _cfg.chunk_size, off_t(e.slot) * _cfg.chunk_size);
    if (n != ssize_t(_cfg.chunk_size))
        return status::io_error;
    if (pool::chunk_checksum(_io, e.data_len, meta_of(e), e.meta_len) != e.checksum) {
        _c.corrupt++;
        return status::corrupt;
    }
    _c.disk_hits++;
    copy_bytes(data, _io, e.data_len);
    copy_bytes(meta, meta_of(e), e.meta_len);
    meta_len = e.meta_len;
    data_len = e.data_len;
    served_from = tier::disk;
    // Promote: a chunk read once is likely read again.
    uint32_t slot = 0;
    if (take_arena_slot(slot) == status::ok) {
        entry& moved = _index.at(key{object, chunk});
        copy_bytes(arena_slot(slot), data, moved.data_len);
        copy_bytes(_arena_meta.data() + size_t(slot) * pool::max_meta_len, meta, moved.meta_len);
        _disk_free.push_back(moved.slot);
        moved.where = tier::memory;
        moved.slot = slot;
        (void)_directory.publish(object, chunk, slot, moved.data_len, moved.meta_len,
                                 moved.checksum);
        _arena_keys[slot] = key{object, chunk};
        _policy->stored(slot);
        _c.promotions++;
    }
    return status::ok;
}

uint64_t pool_store::drop(uint64_t object) {
    std::lock_guard lock(_mutex);
    uint64_t n = 0;
    for (auto it = _index.begin(); it != _index.end();) {
        if (it->first.object == object) {
            free_slot(it->second);
            it = _index.erase(it);
            n++;
        } else {
            ++it;
        }
    }
    _c.drops += n;
    return n;
}

pool_store::arena_view pool_store::arena() noexcept {
    return {
        _arena,     _arena_map.size(), _arena_meta.data(), _arena_meta.size(), pool::max_meta_len,
        &_directory};
}

pool_counters pool_store::counters() const {
    std::lock_guard lock(_mutex);
    return _c;
}

std::string pool_store::stats_json() const {
    std::lock_guard lock(_mutex);
    nlohmann::json j;
    j["capacity_bytes"] = _cfg.capacity_bytes;
    j["chunk_size"] = _cfg.chunk_size;
    j["eviction"] = _policy->name();
    j["disk_direct_io"] = _direct;
    j["chunks_in_memory"] = _slots - _arena_free.size();
    j["chunks_on_disk"] = _index.size() - (_slots - _arena_free.size());
    j["memory_hits"] = _c.memory_hits;
    j["memory_misses"] = _c.memory_misses;
    j["disk_hits"] = _c.disk_hits;
    j["disk_misses"] = _c.disk_misses;
    j["evictions"] = _c.evictions;
    j["promotions"] = _c.promotions;
    j["puts"] = _c.puts;
    j["drops"] = _c.drops;
    j["corrupt"] = _c.corrupt;
    return j.dump();
}

} // namespace ferry::pagesrv
