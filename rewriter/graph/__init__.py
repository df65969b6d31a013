"""Graph utilities below every stage: walking scopes, op schemas, type inference."""
