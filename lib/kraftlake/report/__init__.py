"""An incident as a picture: a timeline aggregated from the warehouse, rendered as one HTML page."""
