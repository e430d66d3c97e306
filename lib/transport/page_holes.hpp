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
#include <string>
#include <vector>

namespace ferry {

struct page_hole {
    uint32_t pid = 0; // image pid
    uint64_t start = 0, end = 0;
    bool operator==(const page_hole&) const = default;
};

struct page_holes_answer {
    std::vector<page_hole> holes;
    std::string unknown; // why the source could not tell (then: no holes)
};

// Asks the source daemon at `source` for migration `migration_id`'s holes:
// connects within `connect_timeout`, then waits up to `wait` for the answer
// (the source scans once it is registered). Throws on any failure.
page_holes_answer fetch_page_holes(const net::endpoint& source, const tls::credentials_ptr& creds,
                                   const std::string& migration_id,
                                   std::chrono::milliseconds connect_timeout,
                                   std::chrono::milliseconds wait);

} // namespace ferry
