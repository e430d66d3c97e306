#include "pool/pool_blob.hpp"

#include "core/checksum.hpp"
#include "core/error.hpp"
#include "core/page.hpp"
#include "core/wire_bytes.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstring>

namespace ferry::pool {

namespace {

constexpr uint64_t blob_magic = 0x31424c4259525246ull; // "FRRYBLB1"
constexpr uint64_t max_blob_bytes = 1ull << 30;
constexpr auto read_timeout = std::chrono::seconds(30);

// Reads pages [first, +count) into `out`, checking each page's checksum.
// False if the pool does not hold them.
bool read_pages(pool_client& c, uint64_t first, uint64_t count, std::byte* out) {
    constexpr uint32_t per_read = 64;
    for (uint64_t done = 0; done < count;) {
        const auto n = uint32_t(std::min<uint64_t>(per_read, count - done));
        int slot = -1;
        const auto st = c.read_now(first + done, n, read_mode::normal, slot,
                                   std::chrono::steady_clock::now() + read_timeout);
        const auto bad = st == read_status::ok ? c.first_bad_page(slot) : std::nullopt;
        const std::string lost = st == read_status::lost ? c.read_error(slot) : "";
        if (st == read_status::ok && !bad)
            std::memcpy(out + done * page_size, c.read_pages(slot), size_t(n) * page_size);
        c.end_read(slot);
        if (st == read_status::missing)
            return false;
        if (st == read_status::lost)
            throw error(lost);
        if (bad)
            throw error(fmt::format("page {} of pool object {:016x} fails its checksum",
                                    first + done + *bad, c.object()));
        done += n;
    }
    return true;
}

} // namespace

void put_blob(const pool_spec& spec, uint64_t object, std::span<const std::byte> bytes) {
    if (bytes.size() > max_blob_bytes)
        throw error(fmt::format("a pool blob holds at most {} bytes", max_blob_bytes));
    auto health = std::make_shared<pool_health>(spec);
    pool_client c(spec, object, health, pool_client::options{.name = "blob"});
    if (health->dead_mask())
        throw error("pool nodes unreachable: " + health->lost_nodes());
    const auto& layout = c.layout();
    const uint64_t pages = 1 + (bytes.size() + page_size - 1) / page_size;
    const uint64_t stripes = layout.stripes_for(pages);
    std::vector<std::byte> buf(stripes * layout.pages_per_stripe * page_size);
    std::byte* h = buf.data();
    wire_bytes::store_le<uint64_t>(h, blob_magic);
    wire_bytes::store_le<uint64_t>(h + 8, bytes.size());
    wire_bytes::store_le<uint64_t>(h + 16, buffer_checksum(bytes.data(), bytes.size()));
    if (!bytes.empty())
        std::memcpy(buf.data() + page_size, bytes.data(), bytes.size());
    std::vector<uint64_t> sums(stripes * layout.pages_per_stripe);
    for (size_t i = 0; i < sums.size(); i++)
        sums[i] = page_checksum(buf.data() + i * page_size);
    constexpr uint64_t batch = 64;
    for (uint64_t s = 0; s < stripes; s += batch) {
        const auto n = uint32_t(std::min(batch, stripes - s));
        const size_t at = s * layout.pages_per_stripe;
        if (c.put_stripes(s, n, buf.data() + at * page_size, sums.data() + at))
            throw error("pool nodes failed while storing a blob: " + health->lost_nodes());
    }
}

std::optional<std::vector<std::byte>> get_blob(const pool_spec& spec, uint64_t object) {
    auto health = std::make_shared<pool_health>(spec);
    pool_client c(spec, object, health,
                  pool_client::options{.name = "blob", .read_slots = 1, .max_read_pages = 64});
    std::vector<std::byte> first(page_size);
    if (!read_pages(c, 0, 1, first.data()))
        return std::nullopt;
    const std::byte* h = first.data();
    if (wire_bytes::load_le<uint64_t>(h) != blob_magic)
        throw error(fmt::format("pool object {:016x} is not a blob", object));
    const uint64_t length = wire_bytes::load_le<uint64_t>(h + 8),
                   checksum = wire_bytes::load_le<uint64_t>(h + 16);
    if (length > max_blob_bytes)
        throw error(
            fmt::format("pool object {:016x}: blob length {} is impossible", object, length));
    std::vector<std::byte> out((length + page_size - 1) / page_size * page_size);
    if (!read_pages(c, 1, out.size() / page_size, out.data()))
        throw error(fmt::format("pool object {:016x}: the blob is incomplete", object));
    out.resize(length);
    if (buffer_checksum(out.data(), out.size()) != checksum)
        throw error(fmt::format("pool object {:016x}: the blob fails its checksum", object));
    return out;
}

void drop_blob(const pool_spec& spec, uint64_t object) {
    auto health = std::make_shared<pool_health>(spec);
    pool_client c(spec, object, health, pool_client::options{.name = "blob"});
    c.drop_object();
}

} // namespace ferry::pool
