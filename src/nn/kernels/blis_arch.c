/*
 * blis_arch.c - choose BLIS's kernel set ourselves.
 *
 * BLIS asks bli_cpuid_query_id() once, at initialisation, which kernel set to
 * use. Debian's BLIS 0.9.0 answers "generic" (reference C kernels, about 5x
 * slower) on CPUs newer than it knows, such as AMD Zen 5, and its
 * BLIS_ARCH_TYPE override aborts. When pstrain links the static archive
 * (PSTRAIN_BLIS_OVERRIDE), our definition below pre-empts the archive's and
 * decides from the CPU's instruction sets instead of its model number: the
 * kernels need instruction sets, not a particular model.
 */
#include "pstrain_config.h"

#include <blis.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/blas.h"

#if PSTRAIN_BLIS_OVERRIDE && defined(__x86_64__)
#include <cpuid.h>

static unsigned long long xgetbv0(void)
{
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static arch_t arch_from_name(const char *s, arch_t fallback)
{
    static const struct {
        const char *name;
        arch_t id;
    } names[] = {
        {"skx", BLIS_ARCH_SKX},         {"zen3", BLIS_ARCH_ZEN3},
        {"zen2", BLIS_ARCH_ZEN2},       {"zen", BLIS_ARCH_ZEN},
        {"haswell", BLIS_ARCH_HASWELL}, {"sandybridge", BLIS_ARCH_SANDYBRIDGE},
        {"generic", BLIS_ARCH_GENERIC},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) return names[i].id;
    return fallback;
}

static arch_t arch_detect(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return BLIS_ARCH_GENERIC;
    bool amd = b == 0x68747541; /* "Auth"enticAMD */
    if (!__get_cpuid(1, &a, &b, &c, &d)) return BLIS_ARCH_GENERIC;
    bool fma = c & (1u << 12), avx = c & (1u << 28), osxsave = c & (1u << 27);
    if (!osxsave || !avx) return BLIS_ARCH_GENERIC;
    unsigned long long xcr0 = xgetbv0();
    bool os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = (xcr0 & 0xe6) == 0xe6;
    if (!os_avx) return BLIS_ARCH_GENERIC;
    __cpuid_count(7, 0, a, b, c, d);
    bool avx2 = b & (1u << 5);
    bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 28)) && (b & (1u << 30)) &&
                  (b & (1u << 31)); /* F DQ CD BW VL */
    if (avx512 && os_avx512 && fma) return BLIS_ARCH_SKX;
    if (avx2 && fma) return amd ? BLIS_ARCH_ZEN3 : BLIS_ARCH_HASWELL;
    return BLIS_ARCH_SANDYBRIDGE;
}

/* Pre-empts the definition in libblis.a; BLIS calls it once. */
arch_t bli_cpuid_query_id(void)
{
    arch_t id = arch_detect();
    if (PSTRAIN_BLIS_FORCED_ARCH[0]) id = arch_from_name(PSTRAIN_BLIS_FORCED_ARCH, id);
    const char *env = getenv("PSTRAIN_BLIS_ARCH");
    if (env && *env) id = arch_from_name(env, id);
    return id;
}
#endif

const char *nn_blis_arch(void)
{
    return bli_arch_string(bli_arch_query_id());
}

const char *nn_blis_version(void)
{
    return bli_info_get_version_str();
}

void nn_blis_version_print(FILE *out)
{
    const char *arch = nn_blis_arch();
    fprintf(out, "BLIS     %s, kernels: %s (%s)\n", nn_blis_version(), arch,
            PSTRAIN_BLIS_OVERRIDE ? "chosen by pstrain from cpuid" : "chosen by BLIS");
    if (strcmp(arch, "generic") == 0)
        fprintf(out, "warning: BLIS runs its slow generic reference kernels; rebuild with "
                     "-Dblis_arch=auto (static BLIS) or set PSTRAIN_BLIS_ARCH\n");
}

void nn_blis_init(void)
{
    bli_thread_set_num_threads(1);
}
