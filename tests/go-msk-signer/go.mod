module kpress.test/go-msk-signer

go 1.24

require github.com/aws/aws-sdk-go-v2 v1.48.0

require github.com/aws/smithy-go v1.28.9 // indirect
