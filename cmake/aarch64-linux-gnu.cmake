# Cross toolchain for 64-bit Arm Linux with Debian's packaged cross compiler
# (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross). Use it with
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# The tests then run under qemu-user (see CMAKE_CROSSCOMPILING_EMULATOR).

set(CMAKE_SYSTEM_NAME Linux)
# The top-level CMakeLists.txt picks src/ctx_aarch64.S from this name.
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(WEFT_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${WEFT_CROSS_TRIPLE}-gcc)
set(CMAKE_ASM_COMPILER ${WEFT_CROSS_TRIPLE}-gcc)
set(CMAKE_AR ${WEFT_CROSS_TRIPLE}-ar CACHE FILEPATH "cross ar")
set(CMAKE_RANLIB ${WEFT_CROSS_TRIPLE}-ranlib CACHE FILEPATH "cross ranlib")

# Debian installs the target's headers and libraries here (not a full
# sysroot: the cross gcc already knows this path, we only tell find_*()).
set(WEFT_CROSS_ROOT /usr/${WEFT_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH ${WEFT_CROSS_ROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest runs every test executable through qemu; -L points qemu at the
# target's dynamic loader and libc.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-${CMAKE_SYSTEM_PROCESSOR};-L;${WEFT_CROSS_ROOT})

# CMake puts the emulator in front of a test only when add_test names the
# executable target itself; weft's tests use $<TARGET_FILE:...> (so that
# WEFT_TEST_LAUNCHER can come first), which CMake leaves alone. Making the
# emulator the launcher covers those tests and the examples' too. A cache
# default: -DWEFT_TEST_LAUNCHER=... on the command line still wins.
set(WEFT_TEST_LAUNCHER "${CMAKE_CROSSCOMPILING_EMULATOR}" CACHE STRING
    "command each test runs under (valgrind, qemu)")
