/*
 * bcryptprimitives.dll for wine 8: Go >= 1.22 draws random bytes from
 * ProcessPrng, which wine 8 lacks; forward to RtlGenRandom.
 */
#include <windows.h>

typedef BOOLEAN(WINAPI *RtlGenRandomFn)(PVOID, ULONG);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    static RtlGenRandomFn gen;
    if (!gen) gen = (RtlGenRandomFn)GetProcAddress(LoadLibraryA("advapi32.dll"), "SystemFunction036");
    while (len > 0) {
        ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!gen || !gen(data, n)) return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
