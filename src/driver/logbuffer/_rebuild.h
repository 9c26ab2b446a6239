/*
 * Aeron's TermRebuilder step, in one place for the two native modules that
 * insert received datagrams into a term: driver.logbuffer._frames
 * (insert_packet, for the Python path) and driver.media._net (the batched
 * receive of data for known images). See driver.logbuffer.rebuilder.
 */
#ifndef DRIVER_LOGBUFFER_REBUILD_H
#define DRIVER_LOGBUFFER_REBUILD_H

#include <stdint.h>
#include <string.h>

/* If the slot at ``slot`` is empty (its frame_length is 0), copy bytes [8, length) of ``packet`` and then
 * release-store its first 8 bytes (a reader that sees a positive length sees the whole frame); 1 if inserted. */
static inline int
rebuild_insert(char *slot, const char *packet, size_t length)
{
    if (__atomic_load_n((int32_t *)slot, __ATOMIC_ACQUIRE) != 0)
        return 0;
    memcpy(slot + 8, packet + 8, length - 8);
    int64_t word0;
    memcpy(&word0, packet, 8);
    __atomic_store_n((int64_t *)slot, word0, __ATOMIC_RELEASE);
    return 1;
}

#endif
