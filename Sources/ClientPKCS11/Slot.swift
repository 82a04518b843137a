internal import CPKCS11Types
import CredentialCoding
import DerivedCredentials
import FoundationEssentials
import ManagedClient
import SystemSupport

extension Module {
    /// One slot: a managed app's container, and the token it holds while that app is set up,
    /// authorized and has a credential installed. Each slot follows its own app (its own
    /// ``ClientWatch``, lock and authorization), and has its own login, contents, sessions and
    /// the secrets they derived: locking or unauthorizing one app leaves the others' tokens as
    /// they were. A session belongs to the slot it was opened on.
    struct Slot {
        /// The slot's id: its place in the module's list of slots, from 1, fixed for one
        /// initialization.
        let id: CK_SLOT_ID
        /// The app's client.
        let client: ManagedClient
        var sessions: [CK_SESSION_HANDLE: Session] = [:]
        /// The secrets derived while logged in; gone at logout, since their key is.
        var secrets: [CK_OBJECT_HANDLE: SessionObject] = [:]
        var loggedIn = false
        /// Logged in by the policy (``TokenLogin/secureServices``), not by C_Login.
        var automaticLogin = false
        var contents: TokenContents?
        /// What C_WaitForSlotEvent reported last for this slot (or what C_Initialize found; a
        /// slot added later starts absent, so that its token, if it has one, is an event).
        var reported: TokenPresence = .absent
        /// What the app's files said when they were last read.
        var watch: ClientWatch?

        /// A slot for `client`, with no session yet.
        init(id: CK_SLOT_ID, client: ManagedClient) {
            self.id = id
            self.client = client
        }

        /// Where the token stands. The app's files are read again only when one of them changed
        /// (``ClientWatch``); whether its store is unlocked is asked of the keyring every time.
        mutating func presence() -> TokenPresence {
            let stamps = [FileStamp(path: client.stateDirectory)]
            if watch?.stamps != stamps {
                let policy = try? client.currentPolicy()
                watch = ClientWatch(
                    stamps: stamps, unlock: try? client.unlockWatcher(),
                    ready: client.clientID != nil && client.hasInstalledCredential && policy?.state == .authorized,
                    sequence: client.installedSequence, tokenLogin: policy?.tokenLogin ?? .passphrase)
            }
            guard watch?.ready == true else { return .absent }
            return watch?.unlock?.isUnlocked() == true ? .available : .locked
        }

        /// Brings the slot's view up to date before a call that uses its token: a token gone
        /// closes every session of the slot (`CKR_DEVICE_REMOVED`); a locked store logs the
        /// application out of this token and hides the objects; an unlocked one has its
        /// credential read (again after a renewal). No private key is read here: each is decoded
        /// at its first use while logged in (``privateKey(_:for:mechanism:)``).
        ///
        /// `readingContents` false leaves the credential unread: a call that only describes the
        /// token (C_GetTokenInfo) needs its presence and login state, not its objects, so a
        /// program that lists tokens decrypts and parses nothing. The next call that uses the
        /// objects reads them.
        mutating func refresh(readingContents: Bool = true) throws {
            switch presence() {
            case .absent:
                let hadSessions = !sessions.isEmpty
                closeAll()
                contents = nil
                throw ReturnValue(hadSessions ? CKR_DEVICE_REMOVED : CKR_TOKEN_NOT_PRESENT)
            case .locked:
                logOut()
                contents = nil
            case .available:
                // The operator's policy may make the keys usable whenever secure services are.
                if watch?.tokenLogin == .secureServices {
                    if !loggedIn {
                        loggedIn = true
                        automaticLogin = true
                    }
                } else if automaticLogin {
                    logOut()
                }
                guard readingContents else { return }
                let sequence = watch?.sequence
                if contents == nil || contents?.sequence != sequence {
                    // The pairs as the client sealed them: only the certificates are parsed here,
                    // and a key is decoded, and checked against its certificate, at its first use.
                    guard let (credential, history) = try client.installedWithKeyHistory(reading: .asSealed) else {
                        throw ReturnValue(CKR_TOKEN_NOT_PRESENT)
                    }
                    contents = try TokenContents(credential: credential, history: history, sequence: sequence)
                    // Operations begun on the keys of a credential that was replaced end with it.
                    for handle in sessions.keys {
                        sessions[handle]?.signing = nil
                        sessions[handle]?.decrypting = nil
                    }
                }
            }
        }

        /// The session behind `handle`, after ``refresh()``.
        mutating func session(_ handle: CK_SESSION_HANDLE) throws -> Session {
            guard sessions[handle] != nil else { throw ReturnValue(CKR_SESSION_HANDLE_INVALID) }
            try refresh()
            guard let session = sessions[handle] else { throw ReturnValue(CKR_SESSION_HANDLE_INVALID) }
            return session
        }

        /// Forgets the login to this token: its private keys and the secrets derived with them
        /// are dropped, and the operations that used them end.
        mutating func logOut() {
            guard loggedIn else { return }
            loggedIn = false
            automaticLogin = false
            contents?.dropKeys()
            secrets.removeAll()
            for handle in sessions.keys {
                sessions[handle]?.signing = nil
                sessions[handle]?.decrypting = nil
            }
        }

        /// Closes every session of this slot, which logs the application out of its token.
        mutating func closeAll() {
            sessions.removeAll()
            logOut()
        }

        /// The objects a session sees: the token's, its private keys only while logged in, and the
        /// application's secrets derived on this token (which exist only while logged in).
        func visibleObjects() -> [CK_OBJECT_HANDLE] {
            let token = (contents?.handles ?? []).filter { handle in
                loggedIn || contents?.object(handle)?.kind != .privateKey
            }
            return token + secrets.keys.sorted()
        }

        /// The attributes of the object `object` names on this token, or nil when it names none a
        /// session may see.
        func attributes(of object: CK_OBJECT_HANDLE) -> [CK_ATTRIBUTE_TYPE: AttributeValue]? {
            if let object = secrets[object] { return ObjectAttributes.of(object.secret) }
            guard let (pair, kind) = contents?.object(object), loggedIn || kind != .privateKey else {
                return nil
            }
            return ObjectAttributes.of(pair, kind)
        }

        /// The key pair whose private key `handle` names, checked for `use` (and `mechanism`, when
        /// one is being set up): logged in, a private key, allowed to do it, and for signing within
        /// its certificate's validity and the credential's expiration date (the client's rule,
        /// `CredentialLifetime`). The key is decoded from the store at its first use since the
        /// login, and checked against its certificate then (`CKR_GENERAL_ERROR` when it does not
        /// match); it stays decoded until logout, lock or a renewal.
        mutating func privateKey(_ handle: CK_OBJECT_HANDLE, for use: KeyUse, mechanism: CK_MECHANISM_TYPE?) throws
            -> TokenKeyPair
        {
            guard loggedIn else { throw ReturnValue(CKR_USER_NOT_LOGGED_IN) }
            guard let (index, kind) = contents?.pairIndex(handle), var pair = contents?.pairs[index] else {
                throw ReturnValue(CKR_KEY_HANDLE_INVALID)
            }
            guard kind == .privateKey else {
                throw ReturnValue(kind == .publicKey ? CKR_KEY_FUNCTION_NOT_PERMITTED : CKR_KEY_HANDLE_INVALID)
            }
            if let mechanism { try Mechanisms.check(mechanism, for: use, pair: pair) }
            guard Mechanisms.permitted(use, by: pair.permissions) else {
                throw ReturnValue(CKR_KEY_FUNCTION_NOT_PERMITTED)
            }
            // A certificate outside its validity now, or a credential past its expiration date: the
            // key no longer signs (an expired encryption key still opens old mail). Judged at every
            // use, not when the credential was read.
            let now = Date()
            let lapsed = !pair.isValid(at: now) || (contents.map { now > $0.expirationDate } ?? true)
            guard !(use == .sign && lapsed) else { throw ReturnValue(CKR_KEY_FUNCTION_NOT_PERMITTED) }
            if pair.key == nil {
                guard let (credential, history) = try client.installedWithKeyHistory(reading: .asSealed) else {
                    throw ReturnValue(CKR_TOKEN_NOT_PRESENT)
                }
                try contents?.loadKey(at: index, credential: credential, history: history)
                guard let loaded = contents?.pairs[index] else { throw ReturnValue(CKR_GENERAL_ERROR) }
                pair = loaded
            }
            return pair
        }
    }
}
