// Seeded random numbers for sampling: xoshiro128** (Blackman and Vigna), seeded through splitmix32 from a
// list of 32-bit words. Reproducible within JS for a given seed; it does not reproduce numpy's generator.

function splitmix32(state) {
  let z = (state + 0x9e3779b9) | 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

export class Random {
  /** words: 32-bit unsigned integers (the seed material); null: fresh entropy. */
  constructor(words = null) {
    if (words === null) words = [...globalThis.crypto.getRandomValues(new Uint32Array(4))];
    let h = 0x6a09e667;
    for (const w of words) h = splitmix32(h ^ w) ^ Math.imul(h, 0x01000193);
    this.s = new Uint32Array(4);
    for (let i = 0; i < 4; i++) this.s[i] = h = splitmix32(h + i);
    if (!(this.s[0] | this.s[1] | this.s[2] | this.s[3])) this.s[0] = 1;
  }

  nextUint32() {
    const s = this.s;
    const result = Math.imul(rotl(Math.imul(s[1], 5), 7), 9) >>> 0;
    const t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return result;
  }

  /** A float in [0, 1) with 53 random bits. */
  random() {
    return ((this.nextUint32() >>> 5) * 67108864 + (this.nextUint32() >>> 6)) / 9007199254740992;
  }
}

function rotl(x, k) {
  return (x << k) | (x >>> (32 - k));
}

const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/** zlib's crc32 of the ids as little-endian int64 bytes (what runtime/decode/search.py Sampler hashes a source by). */
export function crc32OfIds(ids) {
  let crc = 0xffffffff;
  const bytes = new Uint8Array(new BigInt64Array(ids.map((x) => BigInt(x))).buffer);
  for (const b of bytes) crc = CRC_TABLE[(crc ^ b) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}
