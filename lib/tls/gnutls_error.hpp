// GnuTLS return codes as ferry::error.
#pragma once

#include "core/error.hpp"

#include <fmt/format.h>
#include <gnutls/gnutls.h>

namespace ferry::tls {

// Throws ferry::error("WHAT: GnuTLS's reason") when rc is negative.
inline int check(int rc, const char* what) {
    if (rc < 0)
        throw error(fmt::format("{}: {}", what, gnutls_strerror(rc)));
    return rc;
}

} // namespace ferry::tls
