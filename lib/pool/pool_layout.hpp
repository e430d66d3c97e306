// Where each page of a pooled object lives: the pool's nodes and spares,
// the RAID level, and the stripe geometry. The source's push, the
// destination's reads and the rebuild all derive placement from this one
// description, so they cannot disagree.
//
// A pooled object is a run of pages numbered 0 .. total-1 (the lazy pages of
// a dump, in (pid, address) order: lazy_page_index). Pages are grouped into
// stripes; a stripe's data is split into `data` members of member_len bytes,
// followed by the parity members. Two geometries:
//   whole pages  a stripe holds `data` pages, one whole page per member:
//                a healthy read of one page is one 4 KiB read from one node
//   split pages  a stripe is one page cut into `data` slices (Hydra): every
//                read touches `data` nodes, and losing one of them costs no
//                extra round trip
// Member m of stripe s lives on node slot (m + s) mod members, which rotates
// parity (and RAID-1's primary copy) over every node.
#pragma once

#include "pool/raid.hpp"
#include "sys/net.hpp"
#include "tls/credentials.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::pool {

enum class stripe_kind : uint8_t { whole_pages, split_pages };

[[nodiscard]] std::string_view to_string(stripe_kind k) noexcept;
// "whole" or "split"; throws ferry::error otherwise.
[[nodiscard]] stripe_kind parse_stripe_kind(std::string_view s);

struct stripe_layout {
    raid::geometry geo;
    stripe_kind kind = stripe_kind::whole_pages;
    uint32_t pages_per_stripe = 1;
    uint32_t member_len = 4096;

    // Throws ferry::error if the level cannot run over `nodes`, or if split
    // pages would not cut a page into equal 32-byte-aligned slices.
    static stripe_layout make(raid::level l, uint32_t nodes, stripe_kind k);

    [[nodiscard]] uint32_t members() const noexcept { return geo.members(); }
    [[nodiscard]] uint64_t stripe_of_page(uint64_t page) const noexcept {
        return page / pages_per_stripe;
    }
    [[nodiscard]] uint64_t stripes_for(uint64_t pages) const noexcept {
        return (pages + pages_per_stripe - 1) / pages_per_stripe;
    }
    [[nodiscard]] uint32_t node_of(uint64_t stripe, uint32_t member) const noexcept {
        return uint32_t((member + stripe) % members());
    }
    // The data members holding page `page`'s bytes: [first, last].
    [[nodiscard]] uint32_t first_member_of_page(uint64_t page) const noexcept {
        return kind == stripe_kind::whole_pages ? uint32_t(page % pages_per_stripe) : 0;
    }
    [[nodiscard]] uint32_t last_member_of_page(uint64_t page) const noexcept {
        return kind == stripe_kind::whole_pages ? uint32_t(page % pages_per_stripe) : geo.data - 1;
    }
    // Each member carries the checksums of its stripe's pages as metadata.
    [[nodiscard]] uint32_t meta_len() const noexcept { return pages_per_stripe * 8; }
    [[nodiscard]] std::string describe() const;
};

// What `--pool`, `--raid`, `--pool-spare` and `--pool-layout` describe,
// carried between daemons as one line of text.
struct pool_spec {
    std::vector<net::endpoint> nodes;  // stripe members, in slot order
    std::vector<net::endpoint> spares; // where a lost node's members are rebuilt
    raid::level level = raid::level::raid5;
    stripe_kind kind = stripe_kind::whole_pages;
    // The pooled object's id, when it is not the migration's own (a parked
    // workload restored by a later migration).
    std::optional<uint64_t> object;
    // Who this process is to the nodes (not part of the text form).
    tls::credentials_ptr credentials;

    [[nodiscard]] stripe_layout layout() const {
        return stripe_layout::make(level, uint32_t(nodes.size()), kind);
    }
    // The object holding `migration_id`'s pages.
    [[nodiscard]] uint64_t object_of(std::string_view migration_id) const noexcept;
    // "raid=5 layout=whole nodes=IP:PORT,IP:PORT spares=IP:PORT [object=HEX]"
    [[nodiscard]] std::string to_string() const;
    static pool_spec parse(std::string_view text);
    // "IP:PORT,IP:PORT,..."; throws on an empty or malformed list.
    static std::vector<net::endpoint> parse_nodes(std::string_view list);
};

// The object id of a migration's pages in the pool.
[[nodiscard]] uint64_t object_for(std::string_view migration_id) noexcept;

} // namespace ferry::pool
