// Placeholder: dcverify is built on branch h14s.
print("dcverify: not built yet")
