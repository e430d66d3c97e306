// The engines' request files (read by the runc shim as root): JSON that a
// less trusted writer may have shaped.
#include "engine_request.hpp"

#include <stdio.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

const std::string& request_path() {
    static const std::string path = [] {
        std::string p = "/dev/shm/ferry-fuzz-request." + std::to_string(::getpid());
        // The fuzzer exits through exit() when its time is up: the file goes with it.
        std::atexit([] { ::unlink(request_path().c_str()); });
        return p;
    }();
    return path;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& path = request_path();
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f)
        return 0;
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    try {
        (void)ferry::engines::read_checkpoint_request(path);
    } catch (const std::exception&) {
    }
    try {
        (void)ferry::engines::read_restore_request(path);
    } catch (const std::exception&) {
    }
    return 0;
}
