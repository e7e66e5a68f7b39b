/* CRC-32C (Castagnoli) with the SSE4.2 crc32 instruction, for decode.c's batch checks. */
#ifndef TOPICLAKE_CRC32C_H
#define TOPICLAKE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* 1 if this CPU has the instruction (then crc32c() may be called), else 0. */
int crc32c_available(void);

/* The CRC-32C of `n` bytes, as Kafka's Crc32C and the crc32c package compute it. */
uint32_t crc32c(const uint8_t *data, size_t n);

#endif
