#!/usr/bin/python3
"""A virtual PIV card (NIST SP 800-73-4) for a vpcd reader of pcsc-lite.

The card connects to the reader's TCP port (vpcd listens; the card dials in).
Every message either way is a 2-byte big-endian length and a payload. A
1-byte payload from the reader is a control (0 power off, 1 power on,
2 reset, 4 get ATR); a longer one is a command APDU that the card answers
with response data and a status word.

Only the Python standard library and `cryptography` are used. Private keys
are made on the card and no command reads one back. The card's state lives
in a JSON file written atomically after every change, so a restarted
emulator is the same card.
"""

import argparse
import hashlib
import json
import os
import secrets
import socket
import sys
import tempfile
import threading
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa, utils
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

PIV_AID = bytes.fromhex("A000000308000010000100")
PIV_AID_MIN_PREFIX = 9  # RID + PIX without the version, as OpenSC selects it

# Historical bytes: category 80, compact-TLV tag F (length 9) carrying the
# PIV AID prefix, as some real PIV cards announce themselves.
HISTORICAL = bytes([0x80, 0xF9]) + PIV_AID[:9]


def make_atr():
    t0 = 0x80 | len(HISTORICAL)  # TD1 present, K historical bytes
    body = bytes([t0, 0x01]) + HISTORICAL  # TD1: T=1, nothing follows
    tck = 0
    for b in body:
        tck ^= b
    return bytes([0x3B]) + body + bytes([tck])


ATR = make_atr()

DEFAULT_PIN = "123456"
DEFAULT_PUK = "12345678"
DEFAULT_MGMT_KEY = "010203040506070801020304050607080102030405060708"
DEFAULT_TRIES = 3

# Algorithm identifiers (SP 800-78-4).
ALG_3DES = 0x03
ALG_3DES_ALIAS = 0x00
ALG_AES128 = 0x08
ALG_AES192 = 0x0A
ALG_AES256 = 0x0C
ALG_RSA1024 = 0x06
ALG_RSA2048 = 0x07
ALG_RSA3072 = 0x05
ALG_P256 = 0x11
ALG_P384 = 0x14
RSA_BITS = {ALG_RSA1024: 1024, ALG_RSA2048: 2048, ALG_RSA3072: 3072}
EC_CURVES = {ALG_P256: (ec.SECP256R1, hashes.SHA256, 32), ALG_P384: (ec.SECP384R1, hashes.SHA384, 48)}
MGMT_KEY_LEN = {ALG_3DES: 24, ALG_AES128: 16, ALG_AES192: 24, ALG_AES256: 32}

KEY_MGMT = 0x9B
KEY_PIV_AUTH = 0x9A
KEY_SIGN = 0x9C
KEY_KEYMGMT = 0x9D
KEY_CARD_AUTH = 0x9E
RETIRED = list(range(0x82, 0x96))
ASYM_KEYS = [KEY_PIV_AUTH, KEY_SIGN, KEY_KEYMGMT, KEY_CARD_AUTH] + RETIRED

TAG_DISCOVERY = "7e"
TAG_CCC = "5fc107"
TAG_CHUID = "5fc102"
TAG_HISTORY = "5fc10c"
# Data objects a card management system may write with PUT DATA.
WRITABLE_TAGS = {
    "5fc107", "5fc102", "5fc105", "5fc103", "5fc109", "5fc108", "5fc10a",
    "5fc10b", "5fc101", "5fc106", "5fc10c", "5fc121", "5fc122", "5fc123",
} | {"5fc1%02x" % t for t in range(0x0D, 0x21)}

SENSITIVE_INS = {0x20, 0x24, 0x2C, 0x87}
KNOWN_INS = {0xA4, 0xCB, 0xDB, 0x20, 0x24, 0x2C, 0x87, 0x47, 0xC0}


class CardError(Exception):
    """A command that ends with a status word other than 9000."""

    def __init__(self, sw):
        super().__init__("%04X" % sw)
        self.sw = sw


# ---------------------------------------------------------------- BER-TLV

def tlv(tag, value):
    """Encode one BER-TLV; tag is an int of 1 to 3 bytes."""
    if tag > 0xFFFF:
        t = tag.to_bytes(3, "big")
    elif tag > 0xFF:
        t = tag.to_bytes(2, "big")
    else:
        t = bytes([tag])
    n = len(value)
    if n < 0x80:
        ln = bytes([n])
    elif n < 0x100:
        ln = bytes([0x81, n])
    elif n < 0x10000:
        ln = bytes([0x82]) + n.to_bytes(2, "big")
    else:
        ln = bytes([0x83]) + n.to_bytes(3, "big")
    return t + ln + bytes(value)


def parse_tlvs(data):
    """Parse a run of BER-TLVs into a list of (tag, value); raise 6A80 on bad data."""
    out = []
    i = 0
    while i < len(data):
        tag = data[i]
        i += 1
        if tag & 0x1F == 0x1F:
            while True:
                if i >= len(data):
                    raise CardError(0x6A80)
                tag = (tag << 8) | data[i]
                i += 1
                if not data[i - 1] & 0x80:
                    break
        if i >= len(data):
            raise CardError(0x6A80)
        n = data[i]
        i += 1
        if n & 0x80:
            k = n & 0x7F
            if k == 0 or k > 3 or i + k > len(data):
                raise CardError(0x6A80)
            n = int.from_bytes(data[i:i + k], "big")
            i += k
        if i + n > len(data):
            raise CardError(0x6A80)
        out.append((tag, data[i:i + n]))
        i += n
    return out


def dump_bytes(text):
    """The bytes of an OpenSC hex dump (util_hex_dump_asc) after a "Received" line.

    Each line holds up to 16 bytes as "XX " followed by as many ASCII
    characters; only a multi-line dump pads its last line's hex part to 48.
    """
    lines = [l for l in text.split("Received", 1)[1].splitlines()[1:] if l]
    out = b""
    for i, line in enumerate(lines):
        if len(lines) == 1:
            n = len(line) // 4
        elif i < len(lines) - 1:
            n = 16
        else:
            n = len(line) - 48
        out += bytes.fromhex(line[:3 * n])
    return out


# ---------------------------------------------------------- card objects

def fascn_for_non_federal():
    """A 25-byte FASC-N with agency code 9999 (a non-federal issuer, SP 800-73-4 Part 1 3.1.2)."""
    digits = {str(d): d for d in range(10)}
    chars = [0xB]  # start sentinel
    fields = ["9999", "9999", "999999", "1", "1", "0000000000"]
    for k, f in enumerate(fields):
        chars += [digits[c] for c in f]
        if k < len(fields) - 1:
            chars.append(0xD)  # field separator
    chars += [digits[c] for c in "1" + "0000" + "1"]  # OC, OI, POA
    chars.append(0xF)  # end sentinel
    lrc = 0
    for c in chars:
        lrc ^= c
    chars.append(lrc)
    bits = ""
    for c in chars:
        data = "".join(str((c >> b) & 1) for b in range(4))  # b1 b2 b4 b8
        parity = "1" if data.count("1") % 2 == 0 else "0"  # odd parity
        bits += data + parity
    return int(bits, 2).to_bytes(25, "big")


def make_ccc(serial):
    card_id = bytes.fromhex("A000000116FF02") + hashlib.sha256(b"ccc" + serial).digest()[:14]
    parts = [
        tlv(0xF0, card_id), tlv(0xF1, b"\x21"), tlv(0xF2, b"\x21"), tlv(0xF3, b""),
        tlv(0xF4, b"\x00"), tlv(0xF5, b"\x10"), tlv(0xF6, b""), tlv(0xF7, b""),
        tlv(0xFA, b""), tlv(0xFB, b""), tlv(0xFC, b""), tlv(0xFD, b""), tlv(0xFE, b""),
    ]
    return tlv(0x53, b"".join(parts))


def make_guid(serial):
    """16 bytes: the serial itself when 16 bytes long, else a hash of it."""
    if len(serial) == 16:
        return serial
    return hashlib.sha256(b"guid" + serial).digest()[:16]


def make_chuid(serial):
    parts = [
        tlv(0x30, fascn_for_non_federal()),
        tlv(0x34, make_guid(serial)),
        tlv(0x35, b"20391231"),
        tlv(0x3E, b""),
        tlv(0xFE, b""),
    ]
    return tlv(0x53, b"".join(parts))


def make_discovery():
    # PIN usage policy 40 00: the PIV Card Application PIN only.
    return tlv(0x7E, tlv(0x4F, PIV_AID) + tlv(0x5F2F, b"\x40\x00"))


def application_property_template():
    algs = b"".join(tlv(0x80, bytes([a])) for a in (
        ALG_3DES, ALG_AES128, ALG_AES192, ALG_AES256, ALG_RSA1024, ALG_RSA2048,
        ALG_RSA3072, ALG_P256, ALG_P384)) + tlv(0x06, b"\x00")
    body = (tlv(0x4F, PIV_AID[5:]) + tlv(0x79, tlv(0x4F, PIV_AID[:5]))
            + tlv(0x50, b"DC Virtual PIV") + tlv(0xAC, algs))
    return tlv(0x61, body)


# ------------------------------------------------------------------ state

class State:
    """The card's persistent state (a JSON file) and its volatile security status."""

    def __init__(self, path, serial_hex):
        self.path = path
        if path and os.path.exists(path):
            with open(path) as f:
                self.data = json.load(f)
            if serial_hex and serial_hex.lower() != self.data["serial"]:
                log("state %s already has serial %s; --serial %s ignored" % (path, self.data["serial"], serial_hex))
        else:
            serial = bytes.fromhex(serial_hex) if serial_hex else secrets.token_bytes(16)
            self.data = {
                "version": 1,
                "serial": serial.hex(),
                "pin": DEFAULT_PIN,
                "pin_tries_max": DEFAULT_TRIES,
                "pin_tries": DEFAULT_TRIES,
                "puk": DEFAULT_PUK,
                "puk_tries_max": DEFAULT_TRIES,
                "puk_tries": DEFAULT_TRIES,
                "mgmt_alg": ALG_3DES,
                "mgmt_key": DEFAULT_MGMT_KEY,
                "keys": {},
                "objects": {
                    TAG_CCC: make_ccc(serial).hex(),
                    TAG_CHUID: make_chuid(serial).hex(),
                },
            }
            self.save()
        self.key_cache = {}

    def save(self):
        if not self.path:
            return
        d = os.path.dirname(os.path.abspath(self.path))
        fd, tmp = tempfile.mkstemp(prefix=".card-", dir=d)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.data, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def private_key(self, ref):
        entry = self.data["keys"].get("%02x" % ref)
        if entry is None:
            return None, None
        cached = self.key_cache.get(ref)
        if cached is None or cached[0] != entry["pem"]:
            key = serialization.load_pem_private_key(entry["pem"].encode(), password=None)
            cached = (entry["pem"], key)
            self.key_cache[ref] = cached
        return entry["alg"], cached[1]


def log(msg):
    sys.stderr.write("virtual-piv-card: %s\n" % msg)
    sys.stderr.flush()


# -------------------------------------------------------------------- card

def pin_bytes(text):
    return text.encode() + b"\xff" * (8 - len(text))


def valid_pin_field(field):
    """A PIN field is 8 bytes: 6 to 8 ASCII digits padded with FF."""
    if len(field) != 8:
        return None
    text = field.rstrip(b"\xff")
    if not 6 <= len(text) <= 8 or not all(0x30 <= c <= 0x39 for c in text):
        return None
    return text.decode()


class Card:
    """The PIV card application: answers command APDUs."""

    def __init__(self, state):
        self.state = state
        self.reset()

    def reset(self):
        self.pin_verified = False
        self.pin_always = False  # PIN verified immediately before (for 9C)
        self.mgmt_authenticated = False
        self.mgmt_witness = None
        self.mgmt_challenge = None
        self.chain = None  # (ins, p1, p2, bytearray)
        self.pending = b""  # response bytes left for GET RESPONSE

    # ---- APDU framing
    @staticmethod
    def parse(apdu):
        if len(apdu) < 4:
            raise CardError(0x6700)
        cla, ins, p1, p2 = apdu[0], apdu[1], apdu[2], apdu[3]
        body = apdu[4:]
        data, le, extended = b"", None, False
        if len(body) == 0:
            pass
        elif len(body) == 1:
            le = body[0] or 256
        elif body[0] != 0 or len(body) < 3:
            lc = body[0]
            if len(body) == 1 + lc:
                data = body[1:]
            elif len(body) == 2 + lc:
                data = body[1:1 + lc]
                le = body[-1] or 256
            else:
                raise CardError(0x6700)
        else:
            extended = True
            if len(body) == 3:
                le = int.from_bytes(body[1:3], "big") or 65536
            else:
                lc = int.from_bytes(body[1:3], "big")
                if len(body) == 3 + lc:
                    data = body[3:]
                elif len(body) == 5 + lc:
                    data = body[3:3 + lc]
                    le = int.from_bytes(body[-2:], "big") or 65536
                else:
                    raise CardError(0x6700)
        return cla, ins, p1, p2, bytes(data), le, extended

    def process(self, apdu):
        """Answer one command APDU: returns (response bytes incl. SW, info dict)."""
        info = {"header": apdu[:4].hex().upper(), "lc": 0, "le": None, "unknown": False}
        try:
            cla, ins, p1, p2, data, le, extended = self.parse(apdu)
            info.update(lc=len(data), le=le)
            if cla & 0xE0 or (cla & 0x0F):
                raise CardError(0x6E00)
            if ins == 0xC0:
                return self.get_response(le), info
            self.pending = b""
            if cla & 0x10:
                if ins not in (0xDB, 0x87, 0xCB, 0x20, 0x24, 0x2C, 0x47):
                    raise CardError(0x6884)
                if self.chain and self.chain[:3] != (ins, p1, p2):
                    self.chain = None
                if self.chain is None:
                    self.chain = (ins, p1, p2, bytearray())
                self.chain[3].extend(data)
                return b"\x90\x00", info
            if self.chain:
                if self.chain[:3] == (ins, p1, p2):
                    data = bytes(self.chain[3]) + data
                self.chain = None
            keep_always = False
            if ins == 0xA4:
                out = self.select(p1, p2, data)
            elif ins == 0xCB:
                out = self.get_data(p1, p2, data)
            elif ins == 0xDB:
                out = self.put_data(p1, p2, data)
            elif ins == 0x20:
                out = self.verify(p1, p2, data)
                keep_always = self.pin_always
            elif ins == 0x24:
                out = self.change_reference_data(p1, p2, data)
            elif ins == 0x2C:
                out = self.reset_retry_counter(p1, p2, data)
            elif ins == 0x87:
                out = self.general_authenticate(p1, p2, data)
            elif ins == 0x47:
                out = self.generate_key(p1, p2, data)
            else:
                info["unknown"] = True
                raise CardError(0x6D00)
            if not keep_always:
                self.pin_always = False
            return self.respond(out, le, extended), info
        except CardError as e:
            if info.get("header", "")[2:4] != "20":
                self.pin_always = False
            return e.sw.to_bytes(2, "big"), info

    def respond(self, out, le, extended):
        limit = le if le is not None else 0
        if not extended:
            limit = min(limit, 256)
        if len(out) <= limit:
            return out + b"\x90\x00"
        self.pending = out[limit:]
        rest = len(self.pending)
        return out[:limit] + bytes([0x61, rest if rest < 256 else 0])

    def get_response(self, le):
        if not self.pending:
            raise CardError(0x6985)
        out = self.pending
        self.pending = b""
        return self.respond(out, le or 256, False)

    # ---- SELECT
    def select(self, p1, p2, data):
        if p1 != 0x04:
            raise CardError(0x6A86)
        if len(data) >= PIV_AID_MIN_PREFIX and PIV_AID.startswith(data):
            return application_property_template()
        raise CardError(0x6A82)

    # ---- GET DATA / PUT DATA
    @staticmethod
    def object_tag(data):
        tlvs = parse_tlvs(data)
        if not tlvs or tlvs[0][0] != 0x5C or not 1 <= len(tlvs[0][1]) <= 3:
            raise CardError(0x6A80)
        return tlvs[0][1].hex(), data[2 + len(tlvs[0][1]):]

    def get_data(self, p1, p2, data):
        if (p1, p2) != (0x3F, 0xFF):
            raise CardError(0x6A86)
        tag, _ = self.object_tag(data)
        if tag == TAG_DISCOVERY:
            return make_discovery()
        value = self.state.data["objects"].get(tag)
        if value is None:
            raise CardError(0x6A82)
        return bytes.fromhex(value)

    def put_data(self, p1, p2, data):
        if (p1, p2) != (0x3F, 0xFF):
            raise CardError(0x6A86)
        if not self.mgmt_authenticated:
            raise CardError(0x6982)
        tag, rest = self.object_tag(data)
        if tag not in WRITABLE_TAGS:
            raise CardError(0x6A80)
        tlvs = parse_tlvs(rest)
        if len(tlvs) != 1 or tlvs[0][0] != 0x53:
            raise CardError(0x6A80)
        if len(tlvs[0][1]) == 0:
            self.state.data["objects"].pop(tag, None)
        else:
            self.state.data["objects"][tag] = bytes(rest).hex()
        self.state.save()
        return b""

    # ---- PIN / PUK
    def verify(self, p1, p2, data):
        d = self.state.data
        if p2 != 0x80:
            raise CardError(0x6A88)
        if p1 == 0xFF:
            if data:
                raise CardError(0x6A86)
            self.pin_verified = False
            self.pin_always = False
            return b""
        if p1 != 0x00:
            raise CardError(0x6A86)
        if not data:
            if d["pin_tries"] == 0:
                raise CardError(0x6983)
            if self.pin_verified:
                return b""
            raise CardError(0x63C0 | min(d["pin_tries"], 15))
        if d["pin_tries"] == 0:
            raise CardError(0x6983)
        if len(data) != 8:
            raise CardError(0x6A80)
        if not secrets.compare_digest(data, pin_bytes(d["pin"])):
            self.pin_verified = False
            self.pin_always = False
            d["pin_tries"] -= 1
            self.state.save()
            raise CardError(0x63C0 | min(d["pin_tries"], 15))
        if d["pin_tries"] != d["pin_tries_max"]:
            d["pin_tries"] = d["pin_tries_max"]
            self.state.save()
        self.pin_verified = True
        self.pin_always = True
        return b""

    def change_reference_data(self, p1, p2, data):
        d = self.state.data
        if p1 != 0x00 or p2 not in (0x80, 0x81):
            raise CardError(0x6A88 if p1 == 0 else 0x6A86)
        which = "pin" if p2 == 0x80 else "puk"
        if d[which + "_tries"] == 0:
            raise CardError(0x6983)
        if len(data) != 16:
            raise CardError(0x6A80)
        old, new = data[:8], data[8:]
        if not secrets.compare_digest(old, pin_bytes(d[which])):
            if which == "pin":
                self.pin_verified = False
            d[which + "_tries"] -= 1
            self.state.save()
            raise CardError(0x63C0 | min(d[which + "_tries"], 15))
        text = valid_pin_field(new)
        if text is None:
            raise CardError(0x6A80)
        d[which] = text
        d[which + "_tries"] = d[which + "_tries_max"]
        self.state.save()
        if which == "pin":
            # SP 800-73-4 part 2, 3.2.2: a successful change of the PIN sets its security status.
            self.pin_verified = True
        return b""

    def reset_retry_counter(self, p1, p2, data):
        d = self.state.data
        if p1 != 0x00 or p2 != 0x80:
            raise CardError(0x6A88 if p1 == 0 else 0x6A86)
        if d["puk_tries"] == 0:
            raise CardError(0x6983)
        if len(data) != 16:
            raise CardError(0x6A80)
        puk, new = data[:8], data[8:]
        if not secrets.compare_digest(puk, pin_bytes(d["puk"])):
            d["puk_tries"] -= 1
            self.state.save()
            raise CardError(0x63C0 | min(d["puk_tries"], 15))
        text = valid_pin_field(new)
        if text is None:
            raise CardError(0x6A80)
        d["pin"] = text
        d["pin_tries"] = d["pin_tries_max"]
        d["puk_tries"] = d["puk_tries_max"]
        self.pin_verified = False
        self.state.save()
        return b""

    # ---- GENERAL AUTHENTICATE
    def mgmt_cipher(self, alg):
        key = bytes.fromhex(self.state.data["mgmt_key"])
        if alg == ALG_3DES:
            return Cipher(algorithms.TripleDES(key), modes.ECB()), 8
        return Cipher(algorithms.AES(key), modes.ECB()), 16

    @staticmethod
    def ecb(cipher, data, encrypt):
        ctx = cipher.encryptor() if encrypt else cipher.decryptor()
        return ctx.update(data) + ctx.finalize()

    def general_authenticate(self, p1, p2, data):
        tlvs = parse_tlvs(data)
        if len(tlvs) != 1 or tlvs[0][0] != 0x7C:
            raise CardError(0x6A80)
        items = parse_tlvs(tlvs[0][1])
        fields = {}
        for tag, value in items:
            if tag in fields:
                raise CardError(0x6A80)
            fields[tag] = value
        if p2 == KEY_MGMT:
            return self.mgmt_authenticate(p1, fields)
        if p2 in ASYM_KEYS:
            return self.private_key_operation(p1, p2, fields)
        raise CardError(0x6A86)

    def mgmt_authenticate(self, p1, fields):
        alg = self.state.data["mgmt_alg"]
        asked = ALG_3DES if p1 == ALG_3DES_ALIAS else p1
        # GET CHALLENGE style request of OpenSC's RNG uses alg 00 with any key.
        if asked != alg and not (p1 == ALG_3DES_ALIAS and set(fields) == {0x81} and not fields[0x81]):
            raise CardError(0x6A80)
        cipher, block = self.mgmt_cipher(alg)
        keys = set(fields)
        if keys == {0x80} and not fields[0x80]:
            self.mgmt_authenticated = False
            self.mgmt_witness = secrets.token_bytes(block)
            self.mgmt_challenge = None
            return tlv(0x7C, tlv(0x80, self.ecb(cipher, self.mgmt_witness, True)))
        if keys == {0x80, 0x81}:
            witness, self.mgmt_witness = self.mgmt_witness, None
            if witness is None or not secrets.compare_digest(witness, fields[0x80]):
                self.mgmt_authenticated = False
                raise CardError(0x6982)
            if len(fields[0x81]) != block:
                raise CardError(0x6A80)
            self.mgmt_authenticated = True
            return tlv(0x7C, tlv(0x82, self.ecb(cipher, fields[0x81], True)))
        if keys == {0x81} and not fields[0x81]:
            self.mgmt_authenticated = False
            self.mgmt_witness = None
            self.mgmt_challenge = secrets.token_bytes(block)
            return tlv(0x7C, tlv(0x81, self.mgmt_challenge))
        if keys == {0x82} and fields[0x82]:
            challenge, self.mgmt_challenge = self.mgmt_challenge, None
            if challenge is None or len(fields[0x82]) != block:
                raise CardError(0x6982)
            if not secrets.compare_digest(self.ecb(cipher, challenge, True), fields[0x82]):
                self.mgmt_authenticated = False
                raise CardError(0x6982)
            self.mgmt_authenticated = True
            return b""
        raise CardError(0x6A80)

    def private_key_operation(self, p1, ref, fields):
        alg, key = self.state.private_key(ref)
        if key is None:
            raise CardError(0x6A88)
        if p1 != alg:
            raise CardError(0x6A80)
        if ref == KEY_SIGN:
            if not (self.pin_verified and self.pin_always):
                raise CardError(0x6982)
        elif ref != KEY_CARD_AUTH and not self.pin_verified:
            raise CardError(0x6982)
        if 0x82 not in fields or fields[0x82]:
            raise CardError(0x6A80)
        if 0x81 in fields and 0x85 not in fields:
            payload = fields[0x81]
            if alg in RSA_BITS:
                n = key.public_key().public_numbers().n
                size = RSA_BITS[alg] // 8
                if len(payload) != size or int.from_bytes(payload, "big") >= n:
                    raise CardError(0x6A80)
                pn = key.private_numbers()
                m = int.from_bytes(payload, "big")
                # CRT form of m^d mod n
                m1 = pow(m, pn.dmp1, pn.p)
                m2 = pow(m, pn.dmq1, pn.q)
                h = (pn.iqmp * (m1 - m2)) % pn.p
                result = (m2 + h * pn.q).to_bytes(size, "big")
            else:
                curve, hash_cls, size = EC_CURVES[alg]
                digest = payload[:size].rjust(size, b"\x00")
                result = key.sign(digest, ec.ECDSA(utils.Prehashed(hash_cls())))
        elif 0x85 in fields and 0x81 not in fields:
            if alg not in EC_CURVES:
                raise CardError(0x6A80)
            curve = EC_CURVES[alg][0]
            try:
                peer = ec.EllipticCurvePublicKey.from_encoded_point(curve(), fields[0x85])
            except ValueError:
                raise CardError(0x6A80)
            result = key.exchange(ec.ECDH(), peer)
        else:
            raise CardError(0x6A80)
        return tlv(0x7C, tlv(0x82, result))

    # ---- GENERATE ASYMMETRIC KEY PAIR
    def generate_key(self, p1, p2, data):
        if p1 != 0x00 or p2 not in ASYM_KEYS:
            raise CardError(0x6A86)
        if not self.mgmt_authenticated:
            raise CardError(0x6982)
        tlvs = parse_tlvs(data)
        if len(tlvs) != 1 or tlvs[0][0] != 0xAC:
            raise CardError(0x6A80)
        inner = dict(parse_tlvs(tlvs[0][1]))
        if 0x80 not in inner or len(inner[0x80]) != 1:
            raise CardError(0x6A80)
        alg = inner[0x80][0]
        if alg in RSA_BITS:
            key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS[alg])
            pub = key.public_key().public_numbers()
            e = pub.e.to_bytes((pub.e.bit_length() + 7) // 8, "big")
            out = tlv(0x7F49, tlv(0x81, pub.n.to_bytes(RSA_BITS[alg] // 8, "big")) + tlv(0x82, e))
        elif alg in EC_CURVES:
            key = ec.generate_private_key(EC_CURVES[alg][0]())
            point = key.public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
            out = tlv(0x7F49, tlv(0x86, point))
        else:
            raise CardError(0x6A80)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        self.state.data["keys"]["%02x" % p2] = {"alg": alg, "pem": pem}
        self.state.key_cache.pop(p2, None)
        self.state.save()
        return out


# ------------------------------------------------------------ the reader link

class Emulator:
    def __init__(self, args):
        self.args = args
        self.state = State(args.state, args.serial)
        self.card = Card(self.state)
        self.lock = threading.Lock()
        self.delay_ms = args.delay_ms
        self.inserted = threading.Event()
        self.inserted.set()
        self.quit = threading.Event()
        self.sock = None
        self.remove_on = None  # [ins, skip, lc or None]
        self.stats_total = 0
        self.stats_by_ins = {}
        self.unknown_seen = set()
        self.apdu_log = open(args.apdu_log, "a", buffering=1) if args.apdu_log else None

    # ---- control socket
    def control_loop(self, path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)
        srv.bind(path)
        os.umask(old)
        srv.listen(8)
        srv.settimeout(0.5)
        while not self.quit.is_set():
            try:
                conn, _ = srv.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(5)
                buf = b""
                try:
                    while b"\n" not in buf:
                        chunk = conn.recv(1024)
                        if not chunk:
                            break
                        buf += chunk
                    answer = self.control(buf.split(b"\n")[0].decode(errors="replace").strip())
                    conn.sendall((answer + "\n").encode())
                except OSError:
                    pass
        srv.close()
        try:
            os.unlink(path)
        except OSError:
            pass

    def control(self, line):
        words = line.split()
        if not words:
            return "error empty command"
        cmd = words[0]
        with self.lock:
            if cmd == "remove" and len(words) == 1:
                self.inserted.clear()
                self.drop()
                return "ok"
            if cmd == "insert" and len(words) == 1:
                self.inserted.set()
                return "ok"
            if cmd == "delay" and len(words) == 2 and words[1].isdigit():
                self.delay_ms = int(words[1])
                return "ok"
            if cmd == "remove-on" and len(words) in (2, 3, 4):
                usage = "error usage: remove-on INS-HEX [SKIP] [lc=N]"
                lc = None
                if len(words) >= 3 and words[-1].startswith("lc="):
                    if not words[-1][3:].isdigit():
                        return usage
                    lc = int(words[-1][3:])
                    words = words[:-1]
                if len(words) == 4:
                    return usage
                try:
                    ins = int(words[1], 16)
                    skip = int(words[2]) if len(words) == 3 else 0
                except ValueError:
                    return usage
                if not 0 <= ins <= 0xFF or skip < 0:
                    return usage
                self.remove_on = [ins, skip, lc]
                return "ok"
            if cmd == "stats" and len(words) == 1:
                by_ins = {"%02X" % k: v for k, v in sorted(self.stats_by_ins.items())}
                return json.dumps({"total": self.stats_total, "by_ins": by_ins}, sort_keys=True)
            if cmd == "reset-stats" and len(words) == 1:
                self.stats_total = 0
                self.stats_by_ins = {}
                return "ok"
            if cmd == "quit" and len(words) == 1:
                self.quit.set()
                self.inserted.set()
                self.drop()
                return "ok"
        return "error unknown command: %s" % cmd

    def drop(self):
        s = self.sock
        if s is not None:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ---- vpcd link
    def recv_exact(self, s, n):
        buf = b""
        while len(buf) < n:
            # vpcd writes the length and the payload separately: acknowledge at
            # once, or Nagle on its side waits for our delayed ACK (40 ms).
            if hasattr(socket, "TCP_QUICKACK"):
                try:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
                except OSError:
                    pass
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("reader closed the connection")
            buf += chunk
        return buf

    def send_msg(self, s, payload):
        s.sendall(len(payload).to_bytes(2, "big") + payload)

    def run(self):
        if self.args.control:
            threading.Thread(target=self.control_loop, args=(self.args.control,), daemon=True).start()
        announced = False
        while not self.quit.is_set():
            self.inserted.wait()
            if self.quit.is_set():
                break
            try:
                s = socket.create_connection(("127.0.0.1", self.args.port), timeout=2)
            except OSError:
                if not announced:
                    log("waiting for the reader on 127.0.0.1:%d" % self.args.port)
                    announced = True
                time.sleep(0.2)
                continue
            announced = False
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                if not self.inserted.is_set() or self.quit.is_set():
                    s.close()
                    continue
                self.sock = s
                self.card.reset()
            log("card inserted (port %d)" % self.args.port)
            try:
                self.serve(s)
            except (OSError, ConnectionError) as e:
                log("link ended: %s" % e)
            finally:
                with self.lock:
                    self.sock = None
                    self.card.reset()
                s.close()
                log("card removed")
            if self.inserted.is_set() and not self.quit.is_set():
                time.sleep(0.2)  # reader went away; dial again
        if self.apdu_log:
            self.apdu_log.close()

    def serve(self, s):
        while True:
            n = int.from_bytes(self.recv_exact(s, 2), "big")
            msg = self.recv_exact(s, n)
            if n == 1:
                ctl = msg[0]
                with self.lock:
                    if ctl in (0, 1, 2):
                        self.card.reset()
                    elif ctl == 4:
                        self.send_msg(s, ATR)
                    else:
                        log("unknown control %d" % ctl)
                continue
            with self.lock:
                ins = msg[1] if len(msg) > 1 else -1
                # lc: the data length of a short APDU (the log's "lc="), 0 when it has none
                lc = msg[4] if len(msg) > 5 else 0
                if self.remove_on and self.remove_on[0] == ins and self.remove_on[2] in (None, lc):
                    if self.remove_on[1] == 0:
                        self.remove_on = None
                        self.inserted.clear()
                        self.log_apdu(msg, None, {"header": msg[:4].hex().upper(), "lc": max(len(msg) - 5, 0), "le": None, "unknown": False}, removed=True)
                        raise ConnectionError("card pulled out at INS %02X" % ins)
                    self.remove_on[1] -= 1
                self.stats_total += 1
                self.stats_by_ins[ins] = self.stats_by_ins.get(ins, 0) + 1
                resp, info = self.card.process(msg)
                delay = self.delay_ms
            self.log_apdu(msg, resp, info)
            if delay:
                time.sleep(delay / 1000.0)
            self.send_msg(s, resp)

    def log_apdu(self, msg, resp, info, removed=False):
        if info.get("unknown"):
            key = info["header"]
            if key not in self.unknown_seen:
                self.unknown_seen.add(key)
                log("unknown APDU header %s" % key)
        if not self.apdu_log:
            return
        if removed:
            line = "%s lc=%s removed" % (info["header"], info["lc"])
        else:
            le = info.get("le")
            line = "%s lc=%d le=%s resp=%d sw=%s%s" % (
                info["header"], info.get("lc", 0), "-" if le is None else le, len(resp) - 2,
                resp[-2:].hex().upper(), " unknown" if info.get("unknown") else "")
        self.apdu_log.write("%.3f %s\n" % (time.time(), line))


def main():
    p = argparse.ArgumentParser(description="A virtual PIV card for a vpcd reader.")
    p.add_argument("--port", type=int, default=0x8C7B, help="the vpcd reader's port on 127.0.0.1")
    p.add_argument("--state", help="JSON state file (created with defaults if missing)")
    p.add_argument("--serial", help="card serial (hex) for a new state: the CHUID GUID comes from it")
    p.add_argument("--delay-ms", type=int, default=0, help="sleep before each answer")
    p.add_argument("--apdu-log", help="append one line per APDU (header, lengths, SW; never data)")
    p.add_argument("--control", help="Unix socket taking one-line control commands")
    args = p.parse_args()
    if args.serial:
        try:
            bytes.fromhex(args.serial)
        except ValueError:
            p.error("--serial must be hex")
    emu = Emulator(args)
    import signal
    signal.signal(signal.SIGTERM, lambda *_: (emu.quit.set(), emu.inserted.set(), emu.drop()))
    emu.run()


if __name__ == "__main__":
    main()
