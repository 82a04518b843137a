import AuthTokens

/// Placeholder: the service is built on branch h14s.
enum VerificationServicePlaceholder {}
