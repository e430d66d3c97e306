// What the rdma backend's two ends say besides READs: the token a connect
// presents, and the small RPC for pages the destination found unstaged.
// Fixed-size little-endian structs (both ends are x86-64 builds of Ferry),
// each checked for its size and magic before a field is used.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace ferry::transport::rdma {

using channel_token = std::array<std::byte, 16>;

// The private data of the RDMA CM connect (at most 56 bytes).
struct connect_hello {
    static constexpr uint32_t magic_value = 0x48595246; // "FRYH"
    uint32_t magic = magic_value;
    uint32_t version = 1;
    channel_token token{};
};

// Destination -> source: pages [first_page, first_page + count) of the
// staging region were not staged when it read them.
enum class stage_ask : uint32_t {
    urgent = 1,  // a fault waits: stage them before anything else
    notify = 2,  // background: answer once the stager's own order gets there
    restage = 3, // a checksum failed: write them again from the source task
};
struct stage_message {
    static constexpr uint32_t magic_value = 0x53595246; // "FRYS"
    uint32_t magic = magic_value;
    stage_ask ask = stage_ask::urgent;
    uint64_t first_page = 0;
    uint32_t count = 0;
    uint32_t tag = 0; // echoed in the answer
};

// Source -> destination: the pages of request `tag` are staged (ok), or
// will never be (the request lay outside the region).
struct staged_message {
    static constexpr uint32_t magic_value = 0x41595246; // "FRYA"
    uint32_t magic = magic_value;
    uint32_t tag = 0;
    uint32_t ok = 0;
    uint32_t reserved = 0;
};

template <typename T>
std::span<const std::byte> as_bytes(const T& m) noexcept {
    return {reinterpret_cast<const std::byte*>(&m), sizeof m};
}

// `bytes` as a T, if it is one: the exact size and T's magic.
template <typename T>
std::optional<T> message_from(std::span<const std::byte> bytes) noexcept {
    if (bytes.size() != sizeof(T))
        return std::nullopt;
    T m;
    std::memcpy(&m, bytes.data(), sizeof m);
    if (m.magic != T::magic_value)
        return std::nullopt;
    return m;
}

} // namespace ferry::transport::rdma
