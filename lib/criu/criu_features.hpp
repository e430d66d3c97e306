// What the installed CRIU can do beyond stock 4.1.1, probed by running it:
// the patches in examples/criu-patches may be missing on a host whose CRIU
// came from elsewhere, and Ferry then works as before, only slower.
#pragma once

#include <string>

namespace ferry::criu {

// Whether `criu` knows --lazy-pagemap-only (examples/criu-patches/0004): a
// lazy dump that records which pages are lazy and never parks them in pipes,
// so the freeze does not grow with memory. Ferry reads lazy pages from the
// frozen tasks itself, so it never needs them parked. Probed once per
// process, bounded by 2 s; a CRIU that fails the probe counts as lacking it.
[[nodiscard]] bool supports_lazy_pagemap_only(const std::string& criu);

// The config line that asks for it.
inline constexpr const char* lazy_pagemap_only_option = "lazy-pagemap-only\n";

} // namespace ferry::criu
