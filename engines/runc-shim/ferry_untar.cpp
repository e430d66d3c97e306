// ferry-untar TAR DIR: unpacks a tar Ferry made into DIR (tar_extract.hpp:
// never outside it). The runc shim runs it to refill a restored container's
// /dev/shm; it is a program of its own so that the shim, which CRIU and the
// engines start many times per migration, does not load libarchive.
#include "tar_extract.hpp"

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: ferry-untar TAR DIR\n");
        return 2;
    }
    try {
        ferry::extract_tar(argv[1], argv[2]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ferry-untar: %s\n", e.what());
        return 1;
    }
    return 0;
}
