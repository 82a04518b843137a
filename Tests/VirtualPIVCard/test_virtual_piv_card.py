#!/usr/bin/python3
"""In-process checks of the virtual PIV card's command handling (no reader needed).

Run: /usr/bin/python3 Tests/VirtualPIVCard/test_virtual_piv_card.py
OpenSC 0.23 drives most paths end to end (see README.md); these cover what it
cannot: external authentication (piv-tool -A A:... fails inside OpenSC 0.23),
the PUK's CHANGE REFERENCE DATA, PIN Always on 9C, state reload.
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import virtual_piv_card as v  # noqa: E402
from cryptography.hazmat.primitives import hashes  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, utils  # noqa: E402
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes  # noqa: E402


def apdu(cla, ins, p1, p2, data=b"", le=None):
    out = bytes([cla, ins, p1, p2])
    if data:
        out += bytes([len(data)]) + data
    if le is not None:
        out += bytes([le & 0xFF])
    return out


class CardTests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "card.json")
        self.card = v.Card(v.State(self.path, "00112233"))

    def tearDown(self):
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def send(self, *args, **kw):
        resp, _ = self.card.process(apdu(*args, **kw))
        data, sw = resp[:-2], int.from_bytes(resp[-2:], "big")
        while sw >> 8 == 0x61:
            more, _ = self.card.process(apdu(0, 0xC0, 0, 0, le=sw & 0xFF))
            data += more[:-2]
            sw = int.from_bytes(more[-2:], "big")
        return data, sw

    def tdes(self):
        key = bytes.fromhex(v.DEFAULT_MGMT_KEY)
        return Cipher(algorithms.TripleDES(key), modes.ECB())

    def external_auth(self):
        data, sw = self.send(0, 0x87, 3, 0x9B, v.tlv(0x7C, v.tlv(0x81, b"")), le=0)
        self.assertEqual(sw, 0x9000)
        challenge = dict(v.parse_tlvs(v.parse_tlvs(data)[0][1]))[0x81]
        enc = self.tdes().encryptor()
        answer = enc.update(challenge) + enc.finalize()
        return self.send(0, 0x87, 3, 0x9B, v.tlv(0x7C, v.tlv(0x82, answer)))[1]

    def test_select_and_blank_objects(self):
        data, sw = self.send(0, 0xA4, 4, 0, v.PIV_AID[:9], le=0)
        self.assertEqual(sw, 0x9000)
        self.assertEqual(data[0], 0x61)
        self.assertEqual(self.send(0, 0xA4, 4, 0, bytes.fromhex("A000000001"), le=0)[1], 0x6A82)
        self.assertEqual(self.send(0, 0xCB, 0x3F, 0xFF, bytes.fromhex("5C035FC107"), le=0)[1], 0x9000)
        self.assertEqual(self.send(0, 0xCB, 0x3F, 0xFF, bytes.fromhex("5C035FC102"), le=0)[1], 0x9000)
        self.assertEqual(self.send(0, 0xCB, 0x3F, 0xFF, bytes.fromhex("5C035FC105"), le=0)[1], 0x6A82)
        self.assertEqual(self.send(0, 0x12, 0, 0)[1], 0x6D00)

    def test_external_auth_and_generate(self):
        self.assertEqual(self.send(0, 0x47, 0, 0x9C, bytes.fromhex("AC03800111"), le=0)[1], 0x6982)
        self.assertEqual(self.external_auth(), 0x9000)
        data, sw = self.send(0, 0x47, 0, 0x9C, bytes.fromhex("AC03800111"), le=0)
        self.assertEqual(sw, 0x9000)
        self.assertEqual(data[:2], b"\x7f\x49")
        point = dict(v.parse_tlvs(v.parse_tlvs(data)[0][1]))[0x86]
        pub = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        # PIN Always: 9C needs a VERIFY right before each use
        digest = bytes(range(32))
        ga = v.tlv(0x7C, v.tlv(0x82, b"") + v.tlv(0x81, digest))
        self.assertEqual(self.send(0, 0x87, 0x11, 0x9C, ga, le=0)[1], 0x6982)
        self.assertEqual(self.send(0, 0x20, 0, 0x80, b"123456\xff\xff")[1], 0x9000)
        data, sw = self.send(0, 0x87, 0x11, 0x9C, ga, le=0)
        self.assertEqual(sw, 0x9000)
        sig = dict(v.parse_tlvs(v.parse_tlvs(data)[0][1]))[0x82]
        pub.verify(sig, digest, ec.ECDSA(utils.Prehashed(hashes.SHA256())))
        self.assertEqual(self.send(0, 0x87, 0x11, 0x9C, ga, le=0)[1], 0x6982)
        # a wrong external authentication answer fails
        self.send(0, 0x87, 3, 0x9B, v.tlv(0x7C, v.tlv(0x81, b"")), le=0)
        self.assertEqual(self.send(0, 0x87, 3, 0x9B, v.tlv(0x7C, v.tlv(0x82, b"\0" * 8)))[1], 0x6982)
        # a restarted card is the same card; no private key is ever in an answer
        again = v.Card(v.State(self.path, None))
        self.assertEqual(again.state.data["keys"]["9c"]["alg"], 0x11)
        with open(self.path) as f:
            self.assertIn("PRIVATE KEY", f.read())  # the state file holds them, as the card's memory

    def test_pin_and_puk(self):
        self.assertEqual(self.send(0, 0x20, 0, 0x80)[1], 0x63C3)
        self.assertEqual(self.send(0, 0x20, 0, 0x80, b"000000\xff\xff")[1], 0x63C2)
        self.assertEqual(self.send(0, 0x20, 0, 0x80, b"000000\xff\xff")[1], 0x63C1)
        self.assertEqual(self.send(0, 0x20, 0, 0x80, b"000000\xff\xff")[1], 0x63C0)
        self.assertEqual(self.send(0, 0x20, 0, 0x80, b"123456\xff\xff")[1], 0x6983)
        self.assertEqual(self.send(0, 0x20, 0, 0x80)[1], 0x6983)
        # PUK change: wrong old PUK costs a PUK try, right one sets the new PUK
        self.assertEqual(self.send(0, 0x24, 0, 0x81, b"00000000" + b"87654321")[1], 0x63C2)
        self.assertEqual(self.send(0, 0x24, 0, 0x81, b"12345678" + b"87654321")[1], 0x9000)
        self.assertEqual(self.send(0, 0x2C, 0, 0x80, b"12345678" + b"654321\xff\xff")[1], 0x63C2)
        self.assertEqual(self.send(0, 0x2C, 0, 0x80, b"87654321" + b"654321\xff\xff")[1], 0x9000)
        self.assertEqual(self.send(0, 0x20, 0, 0x80, b"654321\xff\xff")[1], 0x9000)
        self.assertEqual(self.send(0, 0x20, 0, 0x80)[1], 0x9000)
        self.assertEqual(self.send(0, 0x20, 0xFF, 0x80)[1], 0x9000)
        self.assertEqual(self.send(0, 0x20, 0, 0x80)[1], 0x63C3)
        # bad new PIN (5 digits) is refused
        self.assertEqual(self.send(0, 0x24, 0, 0x80, b"654321\xff\xff" + b"12345\xff\xff\xff")[1], 0x6A80)

    def test_chaining_and_long_response(self):
        self.assertEqual(self.external_auth(), 0x9000)
        obj = v.tlv(0x53, v.tlv(0x70, b"\xAA" * 600) + v.tlv(0x71, b"\0") + v.tlv(0xFE, b""))
        body = bytes.fromhex("5C035FC105") + obj
        for i in range(0, len(body), 255):
            part = body[i:i + 255]
            last = i + 255 >= len(body)
            self.assertEqual(self.send(0x00 if last else 0x10, 0xDB, 0x3F, 0xFF, part)[1], 0x9000)
        data, sw = self.send(0, 0xCB, 0x3F, 0xFF, bytes.fromhex("5C035FC105"), le=0)
        self.assertEqual((data, sw), (obj, 0x9000))
        ext = bytes([0, 0xCB, 0x3F, 0xFF, 0, 0, 5]) + bytes.fromhex("5C035FC105") + b"\0\0"
        resp, _ = self.card.process(ext)
        self.assertEqual(resp, obj + b"\x90\x00")


if __name__ == "__main__":
    unittest.main()
