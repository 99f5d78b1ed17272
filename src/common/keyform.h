/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keyform.h - a key's canonical form: what maru-server's index holds, what
 * the shared index digests (shmidx.h, si_digest()), and what libmaru's key
 * map compares -- one definition, so that a key is the same key on every
 * side
 *
 * Keys are MessagePack str, bin or integers, never converted into each
 * other (42 and "42" are two keys).  An integer is 8 bytes little-endian
 * with its sign in the tag: every non-negative integer is KEY_UINT, what
 * type it was sent as (a client's int64 42 and uint64 42 are one key),
 * and a negative one KEY_NINT.
 */
#ifndef MARU_COMMON_KEYFORM_H
#define MARU_COMMON_KEYFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* the tag (2 bits in maru-server's index entries) */
enum key_tag {
	KEY_STR = 0,  /* MessagePack str: the bytes */
	KEY_BIN = 1,  /* MessagePack bin: the bytes */
	KEY_UINT = 2, /* a non-negative integer: 8 bytes little-endian */
	KEY_NINT = 3, /* a negative integer: 8 bytes little-endian */
};

#define KEY_INT_BYTES 8

/**
 * key_int_form - the bytes of integer key @v (@negative: a signed one
 * below zero) into @out
 * Return: its tag.
 */
static inline uint8_t key_int_form(uint64_t v, bool negative,
				   uint8_t out[KEY_INT_BYTES])
{
	int i;

	for (i = 0; i < KEY_INT_BYTES; i++)
		out[i] = (uint8_t)(v >> (8 * i));
	return negative ? KEY_NINT : KEY_UINT;
}

#endif
