// Datagrams from the CRIU plugin and the runc shim, on the daemon's socket.
#include "wire/criu_event_wire.hpp"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    (void)ferry::criu_events::parse(std::string(reinterpret_cast<const char*>(data), size));
    return 0;
}
