// The holes of a migration's lazy pages: runs the source says do not exist
// (never touched, or given back) and so read as zeros. The source finds them
// after the freeze (CRIU records lazy VMAs whole, criu-patches/0006); the
// destination leaves them to the kernel's zero page instead of fetching.
// They travel on a HOLES page channel: control frames over the same
// authenticated connection as any page channel, whatever the fabric.
#pragma once

#include "sys/net.hpp"
#include "tls/credentials.hpp"
#include "wire/control.pb-c.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ferry {

struct page_hole {
    uint32_t pid = 0; // image pid
    uint64_t start = 0, end = 0;
    bool operator==(const page_hole&) const = default;
};

// The lazy areas the destination pulls first (lazy-pages' default
// --early-area-pages), whose holes the source finds at the commit; those of
// larger areas follow once the destination asks.
inline constexpr uint64_t small_area_bytes = 16ull << 20;

struct page_holes_answer {
    std::string unknown; // why the source could not tell (then: no more holes)
};

// Asks the source daemon at `source` for migration `migration_id`'s holes:
// connects within `connect_timeout` and names the migration at once (the TLS
// handshake is then done before the freeze). The source answers in two
// parts, each handed to `holes` as it ends: the small lazy areas' after the
// commit, the others once asked, which is when `ready_to_ask` returns true
// (the destination's restore has finished; false gives up, with `unknown`
// set). Each part is awaited up to `wait`. Throws on any failure.
// `connection`, if set, is handed the connection once it is open and
// nullptr before it closes: another thread may shut it down meanwhile, which
// ends a wait at once (the call then throws).
page_holes_answer fetch_page_holes(const net::endpoint& source, const tls::credentials_ptr& creds,
                                   const std::string& migration_id,
                                   std::chrono::milliseconds connect_timeout,
                                   std::chrono::milliseconds wait,
                                   const std::function<bool()>& ready_to_ask,
                                   const std::function<void(std::vector<page_hole>)>& holes,
                                   const std::function<void(net::stream*)>& connection = {});

} // namespace ferry
