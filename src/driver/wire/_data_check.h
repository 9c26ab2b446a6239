/*
 * The check every received DATA/PAD datagram passes before it is written into
 * an image (today's C driver rules), in one place for the two native modules
 * that run it: driver.wire._datagrams (validate_data_datagram, for the Python
 * path) and driver.media._net (the batched receive of data for known images).
 * Plain reads of a received buffer: no shared memory here.
 */
#ifndef DRIVER_WIRE_DATA_CHECK_H
#define DRIVER_WIRE_DATA_CHECK_H

#include <stdint.h>
#include <string.h>
#include <sys/types.h>

/* Bytes of term covered (0 for a heartbeat), or a negative reason code (see driver.wire.datagram). ``length`` is
 * at most what ``p`` holds. */
static long
data_datagram_check(const unsigned char *p, ssize_t length, long long term_length)
{
    if (length < 32 || (length & 31)) return -1;
    int32_t frame_length, term_offset; uint16_t type; uint8_t version;
    memcpy(&frame_length, p, 4); version = p[4]; memcpy(&type, p + 6, 2); memcpy(&term_offset, p + 8, 4);
    if (term_offset < 0 || term_offset >= term_length || (term_offset & 31)) return -3;
    if (frame_length == 0 && length == 32)
        return (type != 1 || version != 0) ? -4 : 0;
    ssize_t offset = 0, last = length - 32;
    long long next_term_offset = term_offset;
    for (;;) {
        if (frame_length < 32) return -5;
        if (type > 1) return -6;
        if (version != 0) return -7;
        if (term_offset != next_term_offset) return -8;
        long long aligned = ((long long)frame_length + 31) & ~31LL;
        next_term_offset += aligned;
        if (next_term_offset > term_length) return -9;
        offset += (ssize_t)aligned;
        if (offset > last) break;
        memcpy(&frame_length, p + offset, 4); version = p[offset + 4]; memcpy(&type, p + offset + 6, 2);
        memcpy(&term_offset, p + offset + 8, 4);
    }
    if (offset != length && (offset < length || type != 0)) return -10;
    return (long)offset;
}

#endif
