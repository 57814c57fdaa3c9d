#define _GNU_SOURCE
#include "CHaulSystem.h"

#include <fcntl.h>
#include <unistd.h>

int haul_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }
