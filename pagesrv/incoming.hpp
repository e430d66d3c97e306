// Destination role: one incoming migration on one connection from the
// migrator. Receives the images, starts lazy-pages, runs `criu restore
// --lazy-pages`, resumes the tasks only when the migrator says so, and
// relays lazy-pages' progress and final statistics.
#pragma once

#include "sys/stream.hpp"
#include "wire/control.pb-c.h"

namespace ferry::pagesrv {

class daemon;

void serve_incoming(daemon& d, net::stream& conn, const FerryControl__IncomingPrepare& prepare);

} // namespace ferry::pagesrv
