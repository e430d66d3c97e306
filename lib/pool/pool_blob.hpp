// A byte string kept in the pool as an object of its own, with the pool's
// redundancy: page 0 is a header (magic, length, checksum of the whole),
// pages 1.. hold the bytes. Every page also carries its own checksum, as
// migration pages do, so a damaged or rebuilt page is caught before use.
// Parked workloads keep their CRIU images this way (migrator/park.cpp).
#pragma once

#include "pool/pool_client.hpp"
#include "pool/pool_layout.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ferry::pool {

// Stores `bytes` as `object`, replacing what was there. Throws if a node
// cannot take its members: a blob is written with full redundancy or not at all.
void put_blob(const pool_spec& spec, uint64_t object, std::span<const std::byte> bytes);

// The blob, or nothing if the pool does not hold `object`. Throws when it
// cannot be read (more nodes lost than the level tolerates) or is corrupt.
[[nodiscard]] std::optional<std::vector<std::byte>> get_blob(const pool_spec& spec,
                                                             uint64_t object);

// Forgets the blob on every reachable node.
void drop_blob(const pool_spec& spec, uint64_t object);

} // namespace ferry::pool
