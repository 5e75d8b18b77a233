DROP TABLE delivery_attempts;
DROP TABLE deliveries;
DROP TABLE hooks;
DROP TABLE checks;
DROP TABLE gates;
