"""The Spark shell: session, the controller query, the quorum query, SQL views and the plumbing both queries share."""
