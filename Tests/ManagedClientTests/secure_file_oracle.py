# An independent reader and writer of the secure-file format (SecureFiles.swift's header), with
# Python's hmac and the cryptography package's AES-GCM: the tests check our files against it.
#   secure_file_oracle.py open KEYFILE FILE NAME      -- prints the content's SHA-256, hex
#   secure_file_oracle.py seal KEYFILE DIR NAME SIZE  -- writes a file of SIZE pattern bytes into DIR
# The store key is read from KEYFILE (never from argv).
import hashlib, hmac, os, struct, sys
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

CHUNK = 65536
VERSION = 1

def derive(store_key, info):
    return hmac.new(store_key, info, hashlib.sha256).digest()

def aad(name, index, final):
    return bytes([VERSION]) + name + struct.pack(">Q", index) + bytes([1 if final else 0])

def pattern(size):
    return bytes((i * 131 + (i >> 9)) & 0xFF for i in range(size))

def main():
    command, key_file = sys.argv[1], sys.argv[2]
    store_key = open(key_file, "rb").read()
    assert len(store_key) == 32
    if command == "open":
        path, name = sys.argv[3], sys.argv[4].encode()
        data = open(path, "rb").read()
        assert data[:4] == b"DCSF" and data[4] == VERSION, "header"
        aes = AESGCM(derive(store_key, b"dcclient secure-files file key v1" + data[5:37]))
        prefix, offset, index, content = data[37:41], 41, 0, hashlib.sha256()
        while offset < len(data):
            (length,) = struct.unpack(">I", data[offset:offset + 4])
            sealed = data[offset + 4:offset + 4 + length]
            assert len(sealed) == length and 16 <= length <= CHUNK + 16, "chunk length"
            offset += 4 + length
            plain = aes.decrypt(prefix + struct.pack(">Q", index), sealed,
                                aad(name if index else b"", index, offset == len(data)))
            if index == 0:
                assert plain == name, "name chunk"
            else:
                assert len(plain) == CHUNK or offset == len(data), "short chunk before the end"
                content.update(plain)
            index += 1
        assert index > 0
        print(content.hexdigest())
    elif command == "seal":
        directory, name, size = sys.argv[3], sys.argv[4].encode(), int(sys.argv[5])
        content = pattern(size)
        salt, prefix = os.urandom(32), os.urandom(4)
        aes = AESGCM(derive(store_key, b"dcclient secure-files file key v1" + salt))
        chunks = [name] + [content[i:i + CHUNK] for i in range(0, size, CHUNK)]
        out = b"DCSF" + bytes([VERSION]) + salt + prefix
        for index, plain in enumerate(chunks):
            sealed = aes.encrypt(prefix + struct.pack(">Q", index), plain,
                                 aad(name if index else b"", index, index == len(chunks) - 1))
            out += struct.pack(">I", len(sealed)) + sealed
        disk = hmac.new(derive(store_key, b"dcclient secure-files name key v1"), name, hashlib.sha256).hexdigest()
        with open(os.path.join(directory, disk), "wb") as f:
            f.write(out)
        os.chmod(os.path.join(directory, disk), 0o600)
        print(hashlib.sha256(content).hexdigest())

main()
