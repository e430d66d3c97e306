// CRIU images as they arrive from a source host: the destination parses the
// inventory, the process tree, mm and pagemap images before restoring.
#include "criu/criu_image.hpp"

#include <cstdint>
#include <exception>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace ferry::criu;
    if (size == 0)
        return 0;
    const std::span<const uint8_t> file(data + 1, size - 1);
    try {
        switch (data[0] % 4) {
        case 0:
            (void)parse_inventory(file);
            break;
        case 1:
            (void)parse_pstree(file);
            break;
        case 2:
            (void)parse_mm(file, "mm-1.img");
            break;
        default:
            (void)parse_pagemap(file, "pagemap-1.img");
        }
    } catch (const std::exception&) {
        // a corrupt image is refused with an error
    }
    return 0;
}
