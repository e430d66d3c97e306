// A parked workload's record in the pool: its name, where its pages are,
// and its CRIU images. `checkpoint --to-pool` writes it; `restore
// --from-pool` reads it and, once the workload runs again, drops it.
//
// The record is a blob (lib/pool_blob.hpp) replicated on every pool node
// (RAID-1 over all of them), whatever level the pages use: finding it needs
// only the node list, and it survives the loss of all nodes but one.
#pragma once

#include "pool/pool_layout.hpp"
#include "sys/net.hpp"
#include "wire/control.pb-c.h"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::migrator {

struct parked_record_deleter {
    void operator()(FerryControl__ParkedWorkload* p) const noexcept;
};
using parked_record = std::unique_ptr<FerryControl__ParkedWorkload, parked_record_deleter>;

// Throws unless `name` is 1-64 of [A-Za-z0-9_.-].
void check_park_name(std::string_view name);

// Where the record of `name` lives: RAID-1 over `nodes`.
[[nodiscard]] pool::pool_spec record_spec(const pool::pool_spec& pool);
[[nodiscard]] uint64_t record_object(std::string_view name);

// Returns the bytes stored.
uint64_t store_record(const pool::pool_spec& pool, const FerryControl__ParkedWorkload& record);
// Nothing if no workload of that name is parked; throws if the record cannot be read.
[[nodiscard]] parked_record load_record(const pool::pool_spec& pool, std::string_view name);
void drop_record(const pool::pool_spec& pool, std::string_view name) noexcept;

} // namespace ferry::migrator
