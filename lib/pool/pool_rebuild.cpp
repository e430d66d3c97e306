#include "pool/pool_rebuild.hpp"

#include "core/checksum.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/page.hpp"

#include <fmt/format.h>

#include <cstring>
#include <vector>

namespace ferry::pool {

namespace {

constexpr uint32_t batch_pages = 256;

} // namespace

pool_spec current_spec(const pool_spec& spec, const pool_health& health) {
    pool_spec s = spec;
    for (uint32_t i = 0; i < s.nodes.size(); i++)
        s.nodes[i] = health.endpoint(i);
    s.spares.clear();
    return s;
}

rebuild_report rebuild_slot(const pool_spec& spec, uint64_t object, uint64_t total_pages,
                            std::shared_ptr<pool_health> health, uint32_t slot,
                            const net::endpoint& spare) {
    rebuild_report rep;
    const uint64_t start = monotonic_ns();
    try {
        const pool_spec now = current_spec(spec, *health);
        pool_client reader(now, object, health,
                           pool_client::options{.name = "rebuild read",
                                                .read_slots = 1,
                                                .max_read_pages = batch_pages});
        pool_spec target = now;
        target.nodes[slot] = spare;
        auto target_health = std::make_shared<pool_health>(target);
        pool_client writer(target, object, target_health,
                           pool_client::options{.name = "rebuild write"});
        if (target_health->dead(slot))
            throw error("the spare is unreachable: " + target_health->lost_nodes());
        const auto& lay = reader.layout();
        const uint32_t pps = lay.pages_per_stripe;
        const uint64_t stripes = lay.stripes_for(total_pages);
        const uint32_t per_batch = std::max(1u, batch_pages / pps);
        std::vector<std::byte> buf(size_t(per_batch) * pps * page_size + page_size);
        auto* pages = reinterpret_cast<std::byte*>(
            (reinterpret_cast<uintptr_t>(buf.data()) + page_size - 1) & ~uintptr_t(page_size - 1));
        std::vector<uint64_t> sums(size_t(per_batch) * pps);
        for (uint64_t s = 0; s < stripes; s += per_batch) {
            const uint32_t count = uint32_t(std::min<uint64_t>(per_batch, stripes - s));
            const uint32_t n = count * pps; // whole stripes, padding pages included
            int rs = -1;
            const auto st = reader.read_now(s * pps, n, read_mode::normal, rs);
            if (st == read_status::missing) {
                reader.end_read(rs);
                rep.stripes_skipped += count;
                continue;
            }
            if (st != read_status::ok)
                throw error(reader.read_error(rs));
            // Rebuilt data is written back only if it is the data the source sent.
            if (const auto bad = reader.first_bad_page(rs)) {
                reader.end_read(rs);
                throw error(
                    fmt::format("page {} fails its checksum while rebuilding", s * pps + *bad));
            }
            std::memcpy(pages, reader.read_pages(rs), size_t(n) * page_size);
            std::memcpy(sums.data(), reader.read_checksums(rs), size_t(n) * sizeof(uint64_t));
            reader.end_read(rs);
            if (writer.put_slot(s, count, slot, pages, sums.data()))
                throw error("writing the rebuilt members to the spare failed");
            rep.chunks += count; // one member per stripe lives on each slot
        }
        health->replace(slot, spare);
        rep.ok = true;
    } catch (const std::exception& e) {
        rep.error = e.what();
    }
    rep.ns = monotonic_ns() - start;
    return rep;
}

scrub_report scrub(const pool_spec& spec, uint64_t object, uint64_t total_pages,
                   std::shared_ptr<pool_health> health) {
    scrub_report rep;
    try {
        pool_client c(
            current_spec(spec, *health), object, health,
            pool_client::options{.name = "scrub", .read_slots = 1, .max_read_pages = batch_pages});
        const auto& lay = c.layout();
        const uint32_t pps = lay.pages_per_stripe;
        const uint64_t stripes = lay.stripes_for(total_pages);
        const uint32_t per_batch = std::max(1u, batch_pages / pps);
        for (uint64_t s = 0; s < stripes; s += per_batch) {
            const uint32_t count = uint32_t(std::min<uint64_t>(per_batch, stripes - s));
            int rs = -1;
            const auto st = c.read_now(s * pps, count * pps, read_mode::all_members, rs);
            if (st != read_status::ok) {
                rep.incomplete = st == read_status::missing;
                rep.error =
                    rep.incomplete ? fmt::format("stripe {} is missing", s) : c.read_error(rs);
                c.end_read(rs);
                return rep;
            }
            c.end_read(rs);
            rep.stripes += count;
        }
        rep.ok = true;
    } catch (const std::exception& e) {
        rep.error = e.what();
    }
    return rep;
}

} // namespace ferry::pool
