// The engines' request files (read by the runc shim as root): JSON that a
// less trusted writer may have shaped.
#include "engine_request.hpp"

#include <stdio.h>
#include <unistd.h>

#include <cstdint>
#include <exception>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path = "/dev/shm/ferry-fuzz-request." + std::to_string(::getpid());
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
    // Gone after every input: libFuzzer ends with _Exit, which runs no
    // atexit handler, and /dev/shm is memory.
    ::unlink(path.c_str());
    return 0;
}
