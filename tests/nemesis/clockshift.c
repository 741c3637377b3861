/* The nemesis run's clock jump: an LD_PRELOAD shim that adds an offset to this process's wall clock
   (CLOCK_REALTIME and gettimeofday), read from the file named by NEMESIS_CLOCK_FILE at most every 50 ms.
   The monotonic clocks (sleeps, timeouts) are left alone, as a real jump of the wall clock leaves them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static long long offset_ns, checked_ns;

static long long now_monotonic(void) {
    struct timespec ts;
    real_clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long offset(void) {
    const char *path = getenv("NEMESIS_CLOCK_FILE");
    long long now = now_monotonic();
    if (path == NULL || now - checked_ns < 50000000LL) return offset_ns;
    checked_ns = now;
    FILE *file = fopen(path, "r");
    if (file == NULL) return offset_ns;
    double seconds;
    if (fscanf(file, "%lf", &seconds) == 1) offset_ns = (long long)(seconds * 1e9);
    fclose(file);
    return offset_ns;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (real_clock_gettime == NULL) real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    int result = real_clock_gettime(clock, ts);
    if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        long long total = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset();
        ts->tv_sec = total / 1000000000LL;
        ts->tv_nsec = total % 1000000000LL;
    }
    return result;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int result = clock_gettime(CLOCK_REALTIME, &ts);
    if (result == 0 && tv != NULL) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    (void)tz;
    return result;
}
