import Foundation

/// The JSON Schemas of the tools' `--json` documents (`docs/schema/KIND.schema.json`, draft
/// 2020-12), checked by an independent validator: python3's `jsonschema` (Debian's
/// python3-jsonschema), never our own code. ``run(_:_:stdin:environment:currentDirectory:timeout:closing:)``
/// sends it every document that `dcprovision` or `dcclient` printed for `--json` and exited 0
/// with, so each test that asks for JSON checks it against its schema.
public enum JSONSchemas {
    /// Where the schemas are.
    public static let directory = Repository.root + "/docs/schema"

    /// The validator: every schema of the directory in one store (their `$id`s are
    /// `urn:dctoolkit:schema:KIND`, so references between them resolve without a network), the
    /// document on standard input, checked against the schema of its kind (its one key beside
    /// `version`); prints up to five errors, each with its path, and exits 1 when there are any.
    static let script = """
        import json, os, sys, jsonschema
        directory = sys.argv[1]
        store = {}
        for name in os.listdir(directory):
            if name.endswith(".schema.json"):
                with open(os.path.join(directory, name)) as f:
                    schema = json.load(f)
                store[schema["$id"]] = schema
        document = json.load(sys.stdin)
        kinds = [key for key in document if key != "version"]
        if len(kinds) != 1:
            print("not one kind beside version: %s" % sorted(document)); sys.exit(1)
        schema = store.get("urn:dctoolkit:schema:" + kinds[0])
        if schema is None:
            print("no schema for the kind %r in docs/schema" % kinds[0]); sys.exit(1)
        jsonschema.Draft202012Validator.check_schema(schema)
        resolver = jsonschema.RefResolver.from_schema(schema, store=store)
        validator = jsonschema.Draft202012Validator(schema, resolver=resolver)
        errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
        for error in errors[:5]:
            print("%s: %s" % ("/".join(str(p) for p in error.absolute_path) or "(document)", error.message))
        sys.exit(1 if errors else 0)
        """

    /// A document that its schema refuses.
    public struct Violation: Error, CustomStringConvertible {
        /// What the validator said.
        public var description: String
    }

    /// Throws ``Violation`` unless `document` is valid under the schema of its kind.
    public static func validate(_ document: [UInt8]) throws {
        let result = try run(
            "/usr/bin/python3", ["-c", script, directory], stdin: document, environment: [:], timeout: 60)
        guard result.status == 0 else {
            throw Violation(
                description: "the --json document breaks its schema (docs/schema): "
                    + result.stdoutText + result.stderrText + "\n"
                    + String(decoding: document.prefix(2000), as: UTF8.self))
        }
    }

    /// Whether `arguments` run by `executable` print a document to check: one of the tools, with
    /// `--json`.
    static func printsDocument(_ executable: String, _ arguments: [String]) -> Bool {
        ["dcprovision", "dcclient"].contains((executable as NSString).lastPathComponent) && arguments.contains("--json")
    }
}
