// Docker as one of Ferry's engines (engines.cpp lists it).
#pragma once

#include "docker/docker_source.hpp"
