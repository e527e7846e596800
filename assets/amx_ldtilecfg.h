/* Force-included into llama.cpp's build (CFLAGS/CXXFLAGS="-include .../amx_ldtilecfg.h") on Intel CPUs with AMX.

   GCC 12 (12.2, Debian 12's) declares _tile_loadconfig's asm as reading 8 bytes of the 64-byte tile configuration,
   so the compiler drops the stores of the tile rows and column widths before it; llama.cpp's AMX code then loads a
   half-written configuration and dies at its first batch (a general protection fault: "Segmentation fault"). This
   declares all 64 bytes read. Without AMX in the build (or with a compiler whose intrinsic is right) it does nothing
   that matters. */
#if defined(__x86_64__) && defined(__AMX_TILE__)
#include <immintrin.h>
#undef _tile_loadconfig
#define _tile_loadconfig(config) __asm__ volatile("ldtilecfg\t%0" ::"m"(*(const char(*)[64])(config)))
#endif
