// Pool role: the chunks (stripe members) this node stores for pool clients.
// A memory arena of fixed capacity holds the hot chunks; when it is full the
// eviction policy (eviction.hpp) picks a chunk to move to the disk tier, a
// file in tier_dir, from which it is still served (and promoted back).
// Chunks read from disk are checked against the checksum recorded when they
// were stored, so a damaged tier returns `corrupt`, never bad data.
#pragma once

#include "core/mapping.hpp"
#include "core/unique_fd.hpp"
#include "eviction.hpp"
#include "pool/pool_directory.hpp"
#include "wire/pool_wire.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace ferry::pagesrv {

struct pool_store_config {
    uint64_t capacity_bytes = 256u << 20; // the memory arena
    uint32_t chunk_size = 4096;           // largest chunk; every slot is this big
    std::filesystem::path tier_dir;       // the disk tier's directory
    std::string eviction = "lru";
    uint64_t disk_capacity_bytes = 0; // 0: as much as the filesystem holds
};

struct pool_counters {
    uint64_t memory_hits = 0, memory_misses = 0; // a get found the chunk in the arena, or not
    uint64_t disk_hits = 0, disk_misses = 0;     // ... then on disk, or nowhere
    uint64_t evictions = 0, promotions = 0;      // memory -> disk, disk -> memory
    uint64_t puts = 0, drops = 0, corrupt = 0;
};

class pool_store {
  public:
    explicit pool_store(pool_store_config cfg);
    pool_store(const pool_store&) = delete;
    pool_store& operator=(const pool_store&) = delete;
    ~pool_store();

    pool::status put(uint64_t object, uint64_t chunk, std::span<const std::byte> meta,
                     std::span<const std::byte> data);
    // Copies the chunk's metadata and data out (room for max_meta_len and
    // chunk_size bytes).
    pool::status get(uint64_t object, uint64_t chunk, std::byte* meta, uint32_t& meta_len,
                     std::byte* data, uint32_t& data_len, pool::tier& served_from);
    // Forgets every chunk of `object`; returns how many. O(chunks stored).
    uint64_t drop(uint64_t object);

    [[nodiscard]] pool_counters counters() const;
    [[nodiscard]] std::string stats_json() const;
    [[nodiscard]] const pool_store_config& config() const noexcept { return _cfg; }
    [[nodiscard]] const std::filesystem::path& tier_file() const noexcept { return _tier_path; }

    // What one-sided readers see (pool_rdma.hpp registers it): the arena's
    // chunks, their metadata (meta_stride bytes per slot) and the directory
    // of which chunk is in which slot. Reads that way bypass the eviction
    // policy's view of accesses.
    struct arena_view {
        std::byte* chunks;
        size_t chunks_len;
        std::byte* meta;
        size_t meta_len;
        uint32_t meta_stride;
        const pool::pool_directory* directory;
    };
    [[nodiscard]] arena_view arena() noexcept;

  private:
    struct key {
        uint64_t object, chunk;
        bool operator==(const key&) const = default;
    };
    struct key_hash {
        size_t operator()(const key& k) const noexcept {
            return size_t(k.object * 0x9e3779b97f4a7c15ull ^ k.chunk);
        }
    };
    struct entry {
        pool::tier where = pool::tier::memory;
        uint32_t slot = 0;
        uint32_t meta_len = 0, data_len = 0;
        uint64_t checksum = 0; // over data then metadata, as stored
    };

    [[nodiscard]] std::byte* arena_slot(uint32_t s) const noexcept {
        return _arena + size_t(s) * _cfg.chunk_size;
    }
    [[nodiscard]] std::byte* meta_of(const entry& e) noexcept;
    // An arena slot for a new chunk, moving a victim to disk if none is free.
    pool::status take_arena_slot(uint32_t& slot);
    pool::status evict_one();
    pool::status take_disk_slot(uint32_t& slot);
    void free_slot(const entry& e) noexcept;

    pool_store_config _cfg;
    uint32_t _slots;
    mapping _arena_map;
    std::byte* _arena = nullptr;        // _arena_map's
    std::vector<std::byte> _arena_meta; // max_meta_len per arena slot
    pool::pool_directory _directory;    // the arena's chunks, for one-sided readers
    std::vector<key> _arena_keys;       // which chunk each slot holds
    std::vector<uint32_t> _arena_free;  // free arena slots
    std::vector<std::byte> _disk_meta;  // max_meta_len per disk slot
    std::vector<uint32_t> _disk_free;   // free disk slots
    uint32_t _disk_slots = 0;           // the tier file's length in slots
    std::filesystem::path _tier_path;
    unique_fd _tier;
    bool _direct = false; // the tier file is O_DIRECT
    mapping _io_map;
    std::byte* _io = nullptr; // _io_map's: an aligned bounce buffer for the tier
    std::unique_ptr<eviction_policy> _policy;
    std::unordered_map<key, entry, key_hash> _index;
    pool_counters _c;
    mutable std::mutex _mutex;
};

// Parses "64M", "1G", "512K", "4096" (bytes); throws ferry::error otherwise.
uint64_t parse_size(const std::string& text);

} // namespace ferry::pagesrv
