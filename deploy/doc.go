// Package deploy holds the deployment files that sit beside the module's
// root docker-compose files (nginx.conf, the load balancer of the three
// replicas); its test parses docker-compose.yml, docker-compose.single.yml
// and nginx.conf, since no test machine runs Docker.
package deploy
