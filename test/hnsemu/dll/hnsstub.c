/*
 * Stub computenetwork.dll / vmcompute.dll for running hcsshim's hcn package
 * under wine. Every Hcn* function (and HNSCall) is forwarded over TCP to
 * the Go HNS emulator (test/hnsemu), whose address is in the environment
 * variable HNS_EMULATOR ("127.0.0.1:port"). Strings go as UTF-8; strings
 * handed back to hcsshim are allocated with CoTaskMemAlloc, which hcsshim
 * frees with CoTaskMemFree.
 *
 * Wire format, one connection per call:
 *   request:  "<function> <nargs>\n" then per argument "<len>\n<bytes>"
 *   response: "<hresult> <handle> <outlen> <resultlen>\n<out><result>"
 */
#include <winsock2.h>
#include <ws2tcpip.h>
#include <windows.h>
#include <objbase.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E_EMULATOR ((HRESULT)0x80004005L) /* E_FAIL */

static char *utf8(PCWSTR w) {
    if (!w) return NULL;
    int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, NULL, 0, NULL, NULL);
    char *s = (char *)malloc(n > 0 ? n : 1);
    if (n > 0) WideCharToMultiByte(CP_UTF8, 0, w, -1, s, n, NULL, NULL); else s[0] = 0;
    return s;
}

static PWSTR wide(const char *s, int len) {
    int n = MultiByteToWideChar(CP_UTF8, 0, s, len, NULL, 0);
    PWSTR w = (PWSTR)CoTaskMemAlloc((n + 1) * sizeof(WCHAR));
    if (!w) return NULL;
    MultiByteToWideChar(CP_UTF8, 0, s, len, w, n);
    w[n] = 0;
    return w;
}

static char *guidstr(const GUID *g) {
    char *s = (char *)malloc(40);
    if (!g) { s[0] = 0; return s; }
    snprintf(s, 40, "%08lX-%04X-%04X-%02X%02X-%02X%02X%02X%02X%02X%02X",
             (unsigned long)g->Data1, g->Data2, g->Data3, g->Data4[0], g->Data4[1], g->Data4[2],
             g->Data4[3], g->Data4[4], g->Data4[5], g->Data4[6], g->Data4[7]);
    return s;
}

static char *handlestr(void *h) {
    char *s = (char *)malloc(24);
    snprintf(s, 24, "%llu", (unsigned long long)(ULONG_PTR)h);
    return s;
}

static int send_all(SOCKET c, const char *b, int n) {
    while (n > 0) {
        int k = send(c, b, n, 0);
        if (k <= 0) return -1;
        b += k; n -= k;
    }
    return 0;
}

static int recv_all(SOCKET c, char *b, int n) {
    while (n > 0) {
        int k = recv(c, b, n, 0);
        if (k <= 0) return -1;
        b += k; n -= k;
    }
    return 0;
}

static SOCKET dial(void) {
    static int started;
    if (!started) {
        WSADATA wsa;
        if (WSAStartup(MAKEWORD(2, 2), &wsa) != 0) return INVALID_SOCKET;
        started = 1;
    }
    char addr[128] = "127.0.0.1:9777";
    GetEnvironmentVariableA("HNS_EMULATOR", addr, sizeof addr);
    char *colon = strrchr(addr, ':');
    if (!colon) return INVALID_SOCKET;
    *colon = 0;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((u_short)atoi(colon + 1));
    sa.sin_addr.s_addr = inet_addr(addr);
    SOCKET c = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    if (c == INVALID_SOCKET) return c;
    if (connect(c, (struct sockaddr *)&sa, sizeof sa) != 0) {
        closesocket(c);
        return INVALID_SOCKET;
    }
    return c;
}

/* call forwards fn(args) and fills handle/out/result; it frees args. */
static HRESULT call(const char *fn, int nargs, char **args, void **handle, PWSTR *out, PWSTR *result) {
    if (out) *out = NULL;
    if (result) *result = NULL;
    HRESULT hr = E_EMULATOR;
    SOCKET c = dial();
    if (c == INVALID_SOCKET) goto done;
    char head[256];
    int n = snprintf(head, sizeof head, "%s %d\n", fn, nargs);
    if (send_all(c, head, n)) goto close;
    for (int i = 0; i < nargs; i++) {
        const char *a = args[i] ? args[i] : "";
        int len = (int)strlen(a);
        n = snprintf(head, sizeof head, "%d\n", len);
        if (send_all(c, head, n) || send_all(c, a, len)) goto close;
    }
    /* response header */
    char line[256];
    int pos = 0;
    while (pos < (int)sizeof line - 1) {
        if (recv(c, line + pos, 1, 0) != 1) goto close;
        if (line[pos] == '\n') break;
        pos++;
    }
    line[pos] = 0;
    long rhr;
    unsigned long long h;
    int outlen, reslen;
    if (sscanf(line, "%ld %llu %d %d", &rhr, &h, &outlen, &reslen) != 4) goto close;
    char *ob = (char *)malloc(outlen + 1), *rb = (char *)malloc(reslen + 1);
    if (recv_all(c, ob, outlen) == 0 && recv_all(c, rb, reslen) == 0) {
        hr = (HRESULT)rhr;
        if (handle) *handle = (void *)(ULONG_PTR)h;
        if (out && outlen > 0) *out = wide(ob, outlen);
        if (result && reslen > 0) *result = wide(rb, reslen);
    }
    free(ob);
    free(rb);
close:
    closesocket(c);
done:
    for (int i = 0; i < nargs; i++) free(args[i]);
    return hr;
}

#define API __declspec(dllexport) HRESULT WINAPI

/* One family of functions per object kind: network, endpoint, namespace. */
#define FAMILY(Kind)                                                                               \
    API HcnEnumerate##Kind##s(PCWSTR query, PWSTR *ids, PWSTR *result) {                           \
        char *a[] = {utf8(query)};                                                                 \
        return call("HcnEnumerate" #Kind "s", 1, a, NULL, ids, result);                            \
    }                                                                                              \
    API HcnOpen##Kind(const GUID *id, void **h, PWSTR *result) {                                   \
        char *a[] = {guidstr(id)};                                                                 \
        return call("HcnOpen" #Kind, 1, a, h, NULL, result);                                       \
    }                                                                                              \
    API HcnModify##Kind(void *h, PCWSTR settings, PWSTR *result) {                                 \
        char *a[] = {handlestr(h), utf8(settings)};                                                \
        return call("HcnModify" #Kind, 2, a, NULL, NULL, result);                                  \
    }                                                                                              \
    API HcnQuery##Kind##Properties(void *h, PCWSTR query, PWSTR *props, PWSTR *result) {           \
        char *a[] = {handlestr(h), utf8(query)};                                                   \
        return call("HcnQuery" #Kind "Properties", 2, a, NULL, props, result);                     \
    }                                                                                              \
    API HcnDelete##Kind(const GUID *id, PWSTR *result) {                                           \
        char *a[] = {guidstr(id)};                                                                 \
        return call("HcnDelete" #Kind, 1, a, NULL, NULL, result);                                  \
    }                                                                                              \
    API HcnClose##Kind(void *h) {                                                                  \
        char *a[] = {handlestr(h)};                                                                \
        return call("HcnClose" #Kind, 1, a, NULL, NULL, NULL);                                     \
    }

FAMILY(Network)
FAMILY(Endpoint)
FAMILY(Namespace)

API HcnCreateNetwork(const GUID *id, PCWSTR settings, void **h, PWSTR *result) {
    char *a[] = {guidstr(id), utf8(settings)};
    return call("HcnCreateNetwork", 2, a, h, NULL, result);
}

API HcnCreateNamespace(const GUID *id, PCWSTR settings, void **h, PWSTR *result) {
    char *a[] = {guidstr(id), utf8(settings)};
    return call("HcnCreateNamespace", 2, a, h, NULL, result);
}

API HcnCreateEndpoint(void *network, const GUID *id, PCWSTR settings, void **h, PWSTR *result) {
    char *a[] = {handlestr(network), guidstr(id), utf8(settings)};
    return call("HcnCreateEndpoint", 3, a, h, NULL, result);
}

/* vmcompute.dll */
API HNSCall(PCWSTR method, PCWSTR path, PCWSTR object, PWSTR *response) {
    char *a[] = {utf8(method), utf8(path), utf8(object)};
    return call("HNSCall", 3, a, NULL, response, NULL);
}
