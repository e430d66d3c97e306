// Podman as one of Ferry's engines (engines.cpp lists it).
#pragma once

#include "podman/podman_source.hpp"
