// The source's holes (transport/page_holes.hpp) applied to the lazy maps:
// pages that read as zeros on the source leave the lazy map, so the
// background never fetches them and a fault there gets the kernel's zero
// page (uffd_events.cpp's zero_fill), as for any hole.
#pragma once

#include "fault_state.hpp"
#include "transport/page_holes.hpp"

#include <span>

namespace ferry::lazy {

// Applies `holes` to every process of their image pid (forked children
// too: they share the parent's source memory). Pages a fault request is
// out for stay, and so do ranges mremap moved (their addresses no longer
// match the source's): both are fetched as before. Returns the pages that
// left the original processes' lazy maps.
uint64_t apply_holes(fault_state& s, std::span<const page_hole> holes);

} // namespace ferry::lazy
